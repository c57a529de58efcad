"""What the device thread hands the UI: a summary of the loaded session and, per sample, its
wiring-independent arrays. Plain data (numpy, str), built on the device thread; no Textual here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from inspector.engines import engine_words
from inspector.tui.drafts import draft_letter, is_second, slots_of
from inspector.wiring import Wiring

if TYPE_CHECKING:  # numpy/torch types only; never imported at module load
    import numpy as np

    from inspector.formats.tokenizer import TokenDecoder
    from inspector.memory import MemoryBudget
    from inspector.sample import SlotInfo
    from inspector.serving.spec import DraftSpec
    from inspector.tui.first_look import FirstLook
    from inspector.tui.tau_settings import Serving
    from inspector.wiring import WiringKey


@dataclass(frozen=True)
class LoggedFigure:
    """What an engine logged (`open --engine-log`), shown beside τ."""

    engine: str  # "vLLM" or "SGLang"
    accept_length: float
    what: str  # "vLLM 1 log line", "vLLM Prometheus counters", ...
    file: str
    steps: int | None = None  # drafted tokens a round, where the log shows it

    @classmethod
    def of(cls, log: Any) -> LoggedFigure:
        """From a `formats.engine_log.EngineLog` (device thread)."""
        from inspector.errors import InputError

        if log.accept_length is None:
            raise InputError(log.path, None, "holds no accept length (no rounds counted)")
        return cls(
            engine_words(log.engine),
            float(log.accept_length),
            str(log.description),
            log.path.name,
            log.steps,
        )

    def line(self) -> str:
        return f"{self.engine} logged {self.accept_length:.2f} ({self.what}, {self.file})"


@dataclass
class Summary:
    """What the UI needs to know about the loaded draft and sample set (not to be confused with
    `inspector.session`, whose `Inputs` name the files it was loaded from)."""

    checkpoint: str
    name: str
    layout: str  # "speculators" or "specforge": the trainer whose metrics the bar shows first
    device: str
    dtype: str
    files: list[str]
    sample_format: str
    slot_info: list[SlotInfo]
    n_blocks: int
    ttt_steps: int
    fc_norms: list[float]
    presets: dict[str, WiringKey | None]
    preset_errors: dict[str, str]
    initial: WiringKey | None
    initial_error: str | None
    decoder: TokenDecoder
    tokenizer: str | None
    input_paths: list[str]
    notes: list[str] = field(default_factory=list)
    load_s: float = 0.0
    budget: MemoryBudget | None = None  # the caches' byte budget (the app's views take a share)
    has_verifier: bool = False  # the trainers' own metrics need the verifier's head (--target)
    first_sample: int = 0  # the first sample that loads (the slot layout comes from it)
    skipped: list[tuple[int, str]] = field(default_factory=list)  # samples before it: (i, error)
    serving: Serving | None = None  # the settings τ starts with
    logged: LoggedFigure | None = None  # an engine's logged figure, shown beside τ
    # The target folder τ at a temperature verifies the drafts with (None: no --target, so τ
    # replays greedy decoding only).
    target: str | None = None
    # `open --compare`: the second draft's folder and wiring (`b` compares the shown sample).
    compare: str | None = None
    compare_wiring: str | None = None
    # The second draft's own summary once it is loaded (`B`), its `initial` under
    # --compare-wiring; its keys in the app are `drafts.second_key(slots)`.
    second: Summary | None = None
    # The trained wiring (the doctor's search) and the one an engine feeds, once the device
    # thread's search answers (`first_look`): their rows are named by role, not by preset.
    first_look: FirstLook | None = None

    def serving_default(self) -> Serving:
        from inspector.tui.tau_settings import Serving

        return self.serving or Serving(default_serving(self.ttt_steps))

    def wiring_label(self, w: Sequence[int]) -> str:
        """'[embed, L2, L4]': `Wiring.label`, the one label every view shows; with a second
        draft (`open --compare`) led by the draft's letter, 'A [embed, L2, L4]' or 'B [...]'."""
        label = Wiring(slots_of(w)).label(self.slot_info)
        return f"{draft_letter(w)} {label}" if self.compare else label

    def preset_name(self, w: Sequence[int]) -> str | None:
        """The preset `w` is, of the draft it feeds (None: none, or the second's is not here)."""
        presets = self.presets
        if is_second(w):
            if self.second is None:
                return None
            presets = self.second.presets
        for name, p in presets.items():
            if p is not None and tuple(p) == slots_of(w):
                return name
        return None

    def role(self, w: Sequence[int]) -> str | None:
        """'trained' or 'fed' (`first_look`) for the first draft's wirings, else None."""
        look = self.first_look
        if look is None or is_second(w):
            return None
        w = tuple(w)
        if w == look.trained:
            return "trained"
        return "fed" if w == look.fed else None

    def name_of(self, w: Sequence[int]) -> str | None:
        """What the views call `w` after its slots: its role once the search has answered
        ('trained', 'fed'; a preset's name could mislead there, since the train preset is the
        config's layers), else its preset's name (None: neither)."""
        return self.role(w) or self.preset_name(w)

    def of_draft(self, w: Sequence[int]) -> Summary:
        """The summary of the draft `w` feeds: this one, or the second draft's (its checkpoint,
        fc blocks and presets, as plain slots; the samples' facts are shared)."""
        if is_second(w):
            if self.second is None:
                raise ValueError("the second draft is not loaded")
            return self.second
        return self


@dataclass
class SampleData:
    """The wiring-independent part of a sample, as numpy (computed once per sample)."""

    index: int
    path: str
    length: int
    input_ids: np.ndarray  # int64 [T]
    loss_mask: np.ndarray  # bool [T]
    texts: list[str]  # visible text of every token
    ends_line: list[bool]
    slot_norms: np.ndarray  # [S, T] float32, NaN/Inf kept
    slot_mean: np.ndarray  # [S] mean norm over the hidden states of loss-masked rows
    slot_nonfinite: np.ndarray  # [S] count of positions with a NaN/Inf norm
    warnings: list[str] = field(default_factory=list)


def positions_of(tokens: int) -> int:
    """A sample's positions: the rows the draft predicts (row j feeds x_{j+1} with position j's
    hidden states and predicts x_{j+2}), two fewer than its tokens. The one count the header, the
    sample list and the cursor's range give."""
    return max(int(tokens) - 2, 0)


def error_text(e: BaseException) -> str:
    """An InputError as its one line (file: field: message); anything else with its type."""
    from inspector.errors import InputError

    if isinstance(e, InputError):
        return str(e)
    return f"{type(e).__name__}: {e}"


def default_serving(ttt_steps: int) -> DraftSpec:
    """A chain of the app's TTT steps (replayed from its predictions, no forward of its own), or
    of `DEFAULT_STEPS` (as `accept`) when it runs only step 0."""
    from inspector.serving.spec import DEFAULT_STEPS, DraftSpec

    return DraftSpec(ttt_steps if ttt_steps > 1 else DEFAULT_STEPS)


def accept_at(a_by_start: np.ndarray, loss_mask: np.ndarray) -> np.ndarray:
    """Per token t: what a round whose first drafted token is t accepts (the round after
    committed x_0..x_{t-1}, capped at its generation run's end, as the walk caps it); -1 where no
    round can draft t (outside the runs, and each run's first token, which the prefill emits)."""
    import numpy as np

    from inspector.metrics.rounds import generation_runs

    # one entry per token of the sample (a_by_start may run on over its continuation)
    out = np.full(len(loss_mask), -1, dtype=np.int64)
    for p, e in generation_runs(loss_mask):
        n = np.arange(p, e)
        out[n + 1] = np.minimum(a_by_start[n], e - n)
    return out
