"""What the panels show, computed from engine results: pure functions, no widgets.

Position numbering is the engine's (and `eagle-inspect eval --positions`'): row j feeds token
x_{j+1} with the hidden states of position j and predicts token x_{j+2}. The strip's cursor sits on
token j+2, the token being predicted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rich.cells import cell_len, set_cell_size

if TYPE_CHECKING:
    import numpy as np

    from inspector.evaluate import SamplePredictions, StepPredictions
    from inspector.tui.events import SampleAccept
    from inspector.tui.summary import SampleData, Summary
    from inspector.wiring import WiringKey

TOKEN_WIDTH = 18
# Token kinds in the strip (per token index t: the prediction of row t-2 at TTT step 0), and the
# number of p(true) colour bins.
NONE, PROMPT, HIT, MISS, OOV = 0, 1, 2, 3, 4
P_BINS = 10
# The rounds line under the strip (per token): emitted by a round, and a round's first token.
IN_ROUND, ROUND_START = 1, 2


@dataclass
class ViewState:
    """One sample under the current wiring and the pinned ones, with derived position lists."""

    data: SampleData
    wiring: WiringKey
    pred: SamplePredictions
    pins: list[tuple[WiringKey, SamplePredictions]] = field(default_factory=list)
    masked_rows: np.ndarray | None = None
    miss_rows: np.ndarray | None = None
    flipped_rows: np.ndarray | None = None
    flip_gain: int = 0  # miss under the reference, hit under the current wiring
    flip_loss: int = 0

    @property
    def s0(self) -> StepPredictions:
        return self.pred.steps[0]

    @property
    def n_rows(self) -> int:
        return int(self.s0.pos.size)

    @property
    def ref(self) -> tuple[WiringKey, SamplePredictions] | None:
        return self.pins[-1] if self.pins else None

    @property
    def sample(self) -> int:
        return self.data.index


def build_view(
    data: SampleData,
    wiring: WiringKey,
    pred: SamplePredictions,
    pins: Sequence[tuple[WiringKey, SamplePredictions]],
) -> ViewState:
    import numpy as np

    v = ViewState(data, tuple(wiring), pred, list(pins))
    s0 = v.s0
    v.masked_rows = np.flatnonzero(s0.masked)
    v.miss_rows = np.flatnonzero(s0.masked & ~s0.hit)
    if v.ref is not None:
        r0 = v.ref[1].steps[0]
        n = min(len(r0), len(s0))
        diff = s0.masked[:n] & (s0.hit[:n] != r0.hit[:n])
        v.flipped_rows = np.flatnonzero(diff)
        v.flip_gain = int((diff & s0.hit[:n]).sum())
        v.flip_loss = int((diff & ~s0.hit[:n]).sum())
    else:
        v.flipped_rows = np.zeros(0, dtype=np.int64)
    return v


def strip_marks(v: ViewState, mask_only: bool) -> tuple[list[int], list[int], list[bool]]:
    """Per-token kind, p(true) bin and visibility for the strip (token t <- row t-2)."""
    import numpy as np

    t = v.data.length
    s0 = v.s0
    n = len(s0)
    kind = np.full(t, NONE, dtype=np.int8)
    rows_kind = np.where(
        s0.masked, np.where(s0.hit, HIT, np.where(s0.in_vocab, MISS, OOV)), PROMPT
    ).astype(np.int8)
    kind[2 : 2 + n] = rows_kind
    pbin = np.zeros(t, dtype=np.int8)
    p = np.nan_to_num(s0.p_true.astype(np.float64), nan=0.0)
    pbin[2 : 2 + n] = np.clip((p * P_BINS).astype(np.int64), 0, P_BINS - 1)
    if mask_only:
        show = np.zeros(t, dtype=bool)
        show[2 : 2 + n] = s0.masked
    else:
        show = np.ones(t, dtype=bool)
    return kind.tolist(), pbin.tolist(), show.tolist()


def round_marks(accept: SampleAccept | None, length: int) -> tuple[list[int], list[int]] | None:
    """The strip's rounds line from a `SampleAccept` (None: not computed yet): per token, a of a
    round whose first drafted token it is (-1: none), and ROUND_START for each round's first
    token, IN_ROUND for the others it emits (`widgets.strip`), else 0."""
    import numpy as np

    if accept is None or len(accept.a_at) != length:
        return None
    marks = np.zeros(length, dtype=np.int8)
    for n, e in zip(accept.starts.tolist(), accept.emitted.tolist(), strict=True):
        if e == 0:  # SGLang's round after the stop: counted, emits nothing here
            continue
        marks[n + 1 : n + 1 + e] = IN_ROUND
        marks[n + 1] = ROUND_START
    return accept.a_at.tolist(), marks.tolist()


# --- text helpers ----------------------------------------------------------------------------
def short(text: str, width: int = TOKEN_WIDTH) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


# The panels are plain Text with padded columns: Rich tables cost milliseconds per repaint, and a
# position move repaints the detail and slot panels on every key press.
def cell(text: str, width: int, right: bool = False) -> str:
    """text padded or cut (with …) to exactly `width` cells."""
    n = cell_len(text)
    if n > width:
        return set_cell_size(text, max(width - 1, 0)) + ("…" if width > 0 else "")
    pad = " " * (width - n)
    return pad + text if right else text + pad


def wiring_name(session: Summary, w: Sequence[int]) -> str:
    """'[embed, L2, L4] trained': the slots, then the role or preset name (`Summary.name_of`)."""
    name = session.name_of(w)
    label = session.wiring_label(w)
    return f"{label} {name}" if name else label
