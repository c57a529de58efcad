"""Small modal dialogs."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen, Screen, ScreenResultType
from textual.widgets import Input, Label

from inspector.formatting import printable

if TYPE_CHECKING:
    from inspector.serving.spec import DraftSpec
    from inspector.tui.tau_settings import Serving

from inspector.engines import Engine

# the engines' names from the registry (a rename is one edit in inspector/engines/)
_SGLANG, _VLLM = (
    Engine.SGLANG.display,
    Engine.VLLM.display,
)


class Dialog(ModalScreen[ScreenResultType]):
    """A modal screen that closes only while it is on top.

    Textual's `dismiss` pops whatever screen is on top. Keys queued faster than screens change
    (a held Enter, a paste, Enter then Escape) can reach a dialog after it was dismissed: its
    second dismiss would pop the screen underneath, the main screen included."""

    def close(self, result: ScreenResultType | None = None) -> None:
        if self.is_current:
            self.dismiss(result)


class GotoScreen(Dialog[int | None]):
    """Ask for a position number; Enter jumps, Escape cancels."""

    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def __init__(self, n_rows: int, current: int) -> None:
        super().__init__()
        self.n_rows = n_rows
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical(id="goto-box", classes="dialog"):
            yield Label(f"go to position (0..{self.n_rows - 1}, now {self.current})")
            yield Input(placeholder="position", type="integer", id="goto-input")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if not text:
            self.close(None)
            return
        try:
            self.close(int(text))
        except ValueError:
            self.notify(f"{text!r} is not a position", severity="error", markup=False)

    def action_cancel(self) -> None:
        self.close(None)


# The dialog's rows: (field id, label, hint). The verification rule is not asked: on saved
# samples only the target-only rules apply, one per engine, and the engine follows the shape
# (a chain: vLLM's one-hot rule; a tree: SGLang's target-only rule with its two thresholds).
DRAFT_ROWS = (
    ("steps", "steps", "--speculative-num-steps"),
    ("topk", "topk", "--speculative-eagle-topk (1: a chain)"),
    ("tokens", "tokens", "--speculative-num-draft-tokens (a chain: steps + 1)"),
)
SAMPLING_ROWS = (
    ("temperature", "temp", "the requests' temperature (0: greedy)"),
    ("top_k", "top-k", "the requests' top_k (0: off)"),
    ("top_p", "top-p", "the requests' top_p (1: off)"),
    ("threshold_single", "thr-1", "a tree: --speculative-accept-threshold-single (1: lossless)"),
    ("threshold_acc", "thr-acc", "a tree: --speculative-accept-threshold-acc (1: lossless)"),
)


class ServingScreen(Dialog["Serving | None"]):
    """The settings τ replays: steps, topk and draft tokens, as SGLang names them, and the
    requests' sampling (at a temperature τ is the expected accept length under the engine's
    rule, which needs the target: `has_target`). Enter (in any field) applies them, Escape
    cancels; a bad combination says why and stays."""

    BINDINGS = [
        Binding("escape", "cancel", "cancel"),
        Binding("ctrl+s", "sweep", "sweep the settings"),
    ]

    def __init__(
        self,
        serving: Serving,
        sweep: Callable[[], Screen] | None = None,
        *,
        has_target: bool = False,
    ) -> None:
        super().__init__()
        self.serving = serving
        self._sweep = sweep  # the sweep screen's factory (None: no device to run it on)
        self.has_target = has_target

    def _values(self) -> dict[str, str]:
        s, sm = self.serving.spec, self.serving.sampling
        out = {
            "steps": str(s.steps),
            "topk": str(s.topk),
            "tokens": "" if s.is_chain else str(s.draft_tokens),
            "temperature": "0",
            "top_k": "0",
            "top_p": "1",
            "threshold_single": "1",
            "threshold_acc": "1",
        }
        if sm is not None:
            out |= {
                "temperature": f"{sm.sampling.temperature:g}",
                "top_k": str(sm.sampling.top_k),
                "top_p": f"{sm.sampling.top_p:g}",
                "threshold_single": f"{sm.verification.threshold_single:g}",
                "threshold_acc": f"{sm.verification.threshold_acc:g}",
            }
        return out

    def compose(self) -> ComposeResult:
        values = self._values()
        with Vertical(id="serving-box", classes="dialog"):
            yield Label("serving settings: what τ replays", classes="dialog-title")
            for rows, kind in ((DRAFT_ROWS, "integer"), (SAMPLING_ROWS, "number")):
                with Vertical(classes="serving-group"):
                    for key, name, hint in rows:
                        if key == "temperature" and not self.has_target:
                            hint += "; > 0 needs --target"
                        with Horizontal(classes="serving-row"):
                            yield Label(name, classes="serving-name")
                            integer = kind == "integer" or key == "top_k"
                            yield Input(
                                values[key],
                                type="integer" if integer else "number",
                                id=f"serving-{key}",
                            )
                            yield Label(hint, classes="serving-hint")
            yield Label(
                "at a temperature τ is expected under the engine's rule (a chain: "
                f"{_VLLM}'s one-hot rule; a tree: {_SGLANG}'s target-only rule), from the target's "
                "distributions",
                classes="serving-note",
            )
            yield Label("", id="serving-error")
            keys = "Enter applies · Esc cancels"
            if self._sweep is not None:
                keys += " · Ctrl+S sweeps the drafting settings (ranked, Enter applies one)"
            yield Label(keys, classes="serving-note")

    def _field(self, key: str) -> str:
        return self.query_one(f"#serving-{key}", Input).value.strip()

    def _number(self, key: str, default: float, cast: Callable[[str], float] = float) -> float:
        from inspector.errors import InputError

        text = self._field(key)
        try:
            return cast(text) if text else default
        except ValueError:
            raise InputError(None, key.replace("_", "-"), f"{text!r} is not a number") from None

    def read(self) -> Serving:
        """The settings typed (InputError when they do not make an engine's settings)."""
        from inspector.engines import default_engine
        from inspector.errors import InputError
        from inspector.serving.sampling_settings import (
            Sampling,
            SamplingSettings,
            Verification,
            default_rule,
        )
        from inspector.serving.spec import DraftSpec
        from inspector.tui.tau_settings import Serving

        if not self._field("steps"):
            raise InputError(None, "steps", "required")
        steps = int(self._number("steps", 0, int))
        topk = int(self._number("topk", 1, int)) or 1
        tokens = None if topk == 1 else (int(self._number("tokens", 0, int)) or None)
        spec = DraftSpec(steps, topk, tokens)  # a chain verifies steps + 1
        sampling = Sampling(
            self._number("temperature", 0.0),
            int(self._number("top_k", 0, int)),
            self._number("top_p", 1.0),
        )
        if sampling.greedy:
            return Serving(spec)
        if not self.has_target:
            raise InputError(
                None,
                "temperature",
                "τ at a temperature needs the target's distributions: open with --target DIR",
            )
        verification = Verification(
            default_rule(default_engine(spec.is_chain).value),
            self._number("threshold_single", 1.0),
            self._number("threshold_acc", 1.0),
        )
        return Serving(
            spec, SamplingSettings.on_samples(sampling, verification, chain=spec.is_chain)
        )

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.apply()

    def apply(self) -> None:
        """Close with the settings typed, or say why they are not settings."""
        from inspector.errors import InputError

        try:
            serving = self.read()
        except InputError as e:
            self.query_one("#serving-error", Label).update(
                printable(e.words())
            )  # the field by name
            return
        self.close(serving)

    def action_cancel(self) -> None:
        self.close(None)

    def action_sweep(self) -> None:
        if self._sweep is None:
            return

        def chosen(spec: DraftSpec | None) -> None:
            # the sweep ranks drafting settings: they go into the fields, the sampling stays
            if spec is None:
                return
            for key, value in (
                ("steps", str(spec.steps)),
                ("topk", str(spec.topk)),
                ("tokens", "" if spec.is_chain else str(spec.draft_tokens)),
            ):
                self.query_one(f"#serving-{key}", Input).value = value
            self.apply()

        self.app.push_screen(self._sweep(), chosen)
