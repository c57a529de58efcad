"""The second draft of `open CKPT SAMPLES --compare CKPT_B`: loaded on the device thread when first
asked, over the first draft's own `SampleSet` (the samples are read once for both), and compared
with the first on one sample at a time (`SampleComparison`): each draft's step-0 predictions
under its own wiring, each one's serving replay under the same engine settings, and the rows
where they part. The set's figure with its interval is `eagle-inspect compare`'s. No Textual;
torch is imported inside.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from inspector.errors import InputError
from inspector.tui.events import SampleComparison

if TYPE_CHECKING:
    from inspector.evaluate import Evaluator
    from inspector.serving.replay import SampleReplay
    from inspector.serving.spec import DraftSpec
    from inspector.wiring import Wiring, WiringKey


class SecondDraft:
    """Draft B and its wiring (`--compare-wiring`, default train), loaded once beside A."""

    def __init__(self, checkpoint: str, wiring: str = "train", *, target=None, dtype="auto"):
        self.checkpoint = str(checkpoint)
        self.wiring_text = wiring
        self._target = target
        self._dtype = dtype
        self._ev: Evaluator | None = None
        self._wiring: Wiring | None = None
        self._error: InputError | None = None  # a load that failed fails the same way again

    def load(self, first: Evaluator) -> tuple[Evaluator, Wiring]:
        """B's evaluator over A's samples, and B's wiring (InputError naming B's file)."""
        if self._error is not None:
            raise self._error
        if self._ev is None:
            try:
                self._ev, self._wiring = self._load(first)
            except InputError as e:
                self._error = e
                raise
        assert self._wiring is not None
        return self._ev, self._wiring

    def _load(self, first: Evaluator) -> tuple[Evaluator, Wiring]:
        from inspector.formats import load_draft

        path = Path(self.checkpoint)
        draft = load_draft(path, target=self._target, dtype=self._dtype, device=first.device)
        a, b = first.draft.config, draft.config
        for field, mine, theirs in (
            ("vocab_size", b.vocab_size, a.vocab_size),
            ("target_hidden_size", b.target_hidden_size, a.target_hidden_size),
        ):
            if mine != theirs:
                raise InputError(
                    path / "config.json",
                    field,
                    f"{mine}: the first draft's is {theirs}, so the two cannot read the same samples",
                )
        ev = first.with_draft(draft)
        return ev, ev.wiring(self.wiring_text)

    def compare(
        self,
        first: Evaluator,
        i: int,
        wiring: WiringKey,
        spec: DraftSpec,
        replay_a: SampleReplay,
        replay_b: SampleReplay,
    ) -> SampleComparison:
        """Sample i under A (`wiring`) and B (its own wiring), with their replays under `spec`."""
        import numpy as np

        from inspector.wiring import Wiring

        ev_b, w_b = self.load(first)
        a = first.predict(i, Wiring(tuple(wiring))).steps[0]
        b = ev_b.predict(i, w_b).steps[0]
        n = min(len(a), len(b))
        masked = a.masked[:n] & b.masked[:n]
        hit_rows = np.flatnonzero(masked & (a.hit[:n] != b.hit[:n]))
        # row j's round drafts x_{j+2}: it starts after committed x_0..x_{j+1}
        m = min(replay_a.a_by_start.size, replay_b.a_by_start.size, n + 1)
        xa, xb = replay_a.a_by_start[1:m], replay_b.a_by_start[1:m]
        accept_rows = np.flatnonzero(xa != xb)
        return SampleComparison(
            index=i,
            wiring=tuple(wiring),
            spec=spec,
            checkpoint_b=self.checkpoint,
            wiring_b=tuple(w_b.slots),
            a=a,
            b=b,
            a_by_start=np.asarray(replay_a.a_by_start),
            b_by_start=np.asarray(replay_b.a_by_start),
            stats_a=replay_a.stats,
            stats_b=replay_b.stats,
            rows=np.union1d(hit_rows, accept_rows).astype(np.int64),
            hit_rows=hit_rows.astype(np.int64),
            accept_rows=accept_rows.astype(np.int64),
        )
