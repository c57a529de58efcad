"""The inspector app: `InspectorApp(inputs, ...)`; the device thread starts after the first paint.

Importing this module imports Textual and our widgets, never torch or numpy: the window paints
first, then the device thread imports torch and loads the draft while the screen stays live.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Sequence
from functools import partial
from typing import TYPE_CHECKING

from textual import events
from textual.app import App, SystemCommand
from textual.screen import Screen

from inspector.tui.collector import IdleCollector
from inspector.tui.device_thread import DeviceThread
from inspector.tui.input_clock import InputClock
from inspector.tui.keys import ActionHelp, actions
from inspector.tui.loader import Loader, default_loader
from inspector.tui.messages import PostReports
from inspector.tui.screens.main import MainScreen

if TYPE_CHECKING:
    from inspector.serving.sampling_settings import SamplingSettings
    from inspector.session import Inputs


COLLECT_EVERY_S = 0.1  # the idle collector's tick (inspector.tui.collector)


class InspectorApp(App):
    """Browse samples and positions of an EAGLE-3 draft, toggle the wiring, compare."""

    CSS_PATH = "app.tcss"
    TITLE = "eagle-inspect"

    def __init__(
        self,
        inputs: Inputs | None = None,
        *,
        device: str = "auto",
        dtype: str = "auto",
        ttt_steps: int = 1,
        memory_budget: str | None = None,
        wiring: str | None = None,
        engine_log: str | None = None,
        sampling: SamplingSettings | None = None,
        compare: tuple[str, str] | None = None,
        loader: Loader | None = None,
        fill: bool = True,
        input_paths: Sequence[str] | None = None,
        export_dir: str | None = None,
        first_look: bool = True,
    ) -> None:
        super().__init__()
        if loader is None:
            if inputs is None:
                raise ValueError("InspectorApp needs inputs or a loader")
            loader = default_loader(
                inputs,
                device=device,
                dtype=dtype,
                ttt_steps=ttt_steps,
                memory_budget=memory_budget,
                engine_log=engine_log,
                sampling=sampling,
                compare=compare,
            )
        if input_paths is None:
            input_paths = inputs.paths() if inputs is not None else []
        self.loader = loader
        self.initial_wiring = wiring
        self.fill = fill
        self.input_paths = list(input_paths)
        self.export_dir = export_dir  # `e` writes here (None: ./eagle-inspect-exports)
        # Once loaded, the doctor's search for the trained wiring; without --wiring the app then
        # shows it beside the wiring an engine feeds (`first_look.py`).
        self.first_look = first_look
        self.device: DeviceThread | None = None
        self.t_created = time.perf_counter()
        self.t_first_paint: float | None = None
        self.torch_at_first_paint: bool | None = None
        self.numpy_at_first_paint: bool | None = None
        self.inputs = InputClock()
        self.collector = IdleCollector(self.inputs)

    def get_default_screen(self) -> Screen:
        return MainScreen(self.inputs)

    @property
    def main(self) -> MainScreen:
        screen = self.screen_stack[0]
        assert isinstance(screen, MainScreen)
        return screen

    def on_ready(self) -> None:
        """First frame is on screen: now start the device thread (which imports torch)."""
        self.t_first_paint = time.perf_counter()
        self.torch_at_first_paint = "torch" in sys.modules
        self.numpy_at_first_paint = "numpy" in sys.modules
        self.device = DeviceThread(
            PostReports(self.main),
            self.loader,
            initial_wiring=self.initial_wiring,
            fill=self.fill,
            input_paths=self.input_paths,
        )
        self.device.start()
        self.set_interval(COLLECT_EVERY_S, self._collect)

    def _collect(self) -> None:
        # Loading (torch's import, the draft) makes 10^5 young objects: the device thread freezes them
        # once loaded, and only then is it worth taking collection over from CPython.
        if not self.collector.running and self.device is not None and self.device.loaded:
            self.collector.start()
        self.collector.tick()

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, events.InputEvent):
            self.inputs.input_seen()
        await super().on_event(event)

    def on_unmount(self) -> None:
        self.collector.stop()
        if self.device is not None:
            self.device.stop(timeout=0.5)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        if not isinstance(screen, MainScreen):
            return
        for a in actions(screen.BINDINGS):
            yield SystemCommand(a.title, a.text, partial(self._palette_action, screen, a))

    async def _palette_action(self, screen: MainScreen, a: ActionHelp) -> None:
        if not screen.ready_for(a.name):
            self.notify(f"{a.title}: not available yet", markup=False)
            return
        await self.run_action(a.action, screen)
