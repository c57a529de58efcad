"""The app's screens as the docs show them, written by the app itself at each site build.

    python docs/screens.py [OUT]        (OUT: docs/img, which git ignores)

Opens the bundled demo in the app, headless (Textual's `App.run_test`, no terminal), presses the
keys that bring up each screen and saves it as SVG (`App.export_screenshot`): the first screen,
the doctor screen, the help screen, the wiring editor, the trainer's view and the draft tree
panel. The site's build hook (`mkdocs_hooks.py`) runs it before the pages are read, so no
screenshot on the site is older than the code that drew it. A file is rewritten only when its
SVG changed (so `mkdocs serve` does not rebuild in a loop on its own output). Prints one line a
screen; exits 1 if the demo is not there or a screen did not come up.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "img"
SIZE = (120, 40)
if str(ROOT) not in sys.path:  # run as a script from anywhere: the checkout's package
    sys.path.insert(0, str(ROOT))


def demo_inputs():
    from inspector.demo_paths import demo_paths
    from inspector.session import Inputs

    demo = demo_paths().root
    tok = demo / "target" / "tokenizer.json"
    return Inputs(
        demo / "draft",
        [str(demo / "samples" / "train")],
        demo / "target",
        None,
        tok if tok.is_file() else None,
        True,
    )


async def until(pilot, done: Callable[[], bool], timeout: float = 180.0) -> None:
    t0 = time.monotonic()
    while not done():
        if time.monotonic() - t0 > timeout:
            raise TimeoutError("the screen did not come up")
        await pilot.pause(0.05)


async def settle(pilot) -> None:
    """The view shown, nothing pending on the device thread, the background fill done."""
    app = pilot.app

    def idle() -> bool:
        main, dev = app.main, app.device
        return (
            main.state.session is not None
            and main.state.view is not None
            and not main.state.pending
            and not main.batch_pending
            and dev is not None
            and dev.idle
            and not dev.fill_pending()
        )

    for _ in range(2):  # idle twice in a row: a result may have queued one more repaint
        await until(pilot, idle)
        await pilot.pause(0.1)


async def keys(pilot, *pressed: str) -> None:
    for k in pressed:
        await pilot.press(k)
        await settle(pilot)


async def first_screen(pilot) -> None:
    await until(pilot, lambda: pilot.app.main.state.session is not None)
    await until(pilot, lambda: pilot.app.main.state.session.first_look is not None)
    await settle(pilot)


async def doctor(pilot) -> None:
    await first_screen(pilot)
    await pilot.press("d")
    await until(pilot, lambda: getattr(pilot.app.screen, "report", None) is not None)
    await pilot.pause(0.2)


async def help_screen(pilot) -> None:
    await first_screen(pilot)
    await pilot.press("question_mark")
    await until(pilot, lambda: type(pilot.app.screen).__name__ == "HelpScreen")
    await pilot.pause(0.3)


async def wiring_editor(pilot) -> None:
    await first_screen(pilot)
    await pilot.press("w")
    await until(pilot, lambda: type(pilot.app.screen).__name__ == "WiringEditor")
    await pilot.press("down", "right")
    await pilot.pause(0.3)


async def trainer_view(pilot) -> None:
    await first_screen(pilot)
    await keys(pilot, "v")


async def tree_panel(pilot) -> None:
    await first_screen(pilot)
    await keys(pilot, "a", "tab", "4", "tab", "8", "enter", "T")


# file name -> what brings the screen up (the names the docs' pages use)
SCREENS: dict[str, Callable[[object], Awaitable[None]]] = {
    "app.svg": first_screen,
    "app-doctor.svg": doctor,
    "app-help.svg": help_screen,
    "app-wiring-editor.svg": wiring_editor,
    "app-trainer-view.svg": trainer_view,
    "app-tree.svg": tree_panel,
}


async def shoot(name: str, bring_up) -> str:
    from textual.widgets import Input

    from inspector.tui.app import InspectorApp

    Input._toggle_cursor = lambda self: None  # no blinking cursor: the same frame every build
    app = InspectorApp(demo_inputs())
    async with app.run_test(size=SIZE) as pilot:
        await bring_up(pilot)
        app.clear_notifications()
        await pilot.pause(0.2)
        return app.export_screenshot(title="eagle-inspect")


def write(path: Path, svg: str) -> bool:
    if path.is_file() and path.read_text(encoding="utf-8") == svg:
        return False
    path.write_text(svg, encoding="utf-8")
    return True


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else OUT
    os.environ["TEXTUAL_ANIMATIONS"] = "none"
    try:
        demo_inputs()
    except Exception as e:  # noqa: BLE001 - the demo's own message (not built, not found)
        print(f"docs/screens.py: {e}", file=sys.stderr)
        return 1
    out.mkdir(parents=True, exist_ok=True)
    for name, bring_up in SCREENS.items():
        t0 = time.monotonic()
        try:
            svg = asyncio.run(shoot(name, bring_up))
        except Exception as e:  # noqa: BLE001 - one line naming the screen, then fail the build
            print(f"docs/screens.py: {name}: {type(e).__name__}: {e}", file=sys.stderr)
            return 1
        changed = write(out / name, svg)
        took = time.monotonic() - t0
        print(f"{out / name}: {'written' if changed else 'unchanged'} ({took:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
