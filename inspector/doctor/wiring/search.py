"""The wiring search: every ordered choice of N slots out of S, ranked by step-0 all-tok accuracy.

Why it is cheap (measured against a naive search in bench/doctor_speed.py):
- fc is linear, so a wiring's fc output is a sum of per-sample cached projections W_b @ slot_s
  (`Evaluator.fc_output`); fc never runs per wiring.
- Several wirings go through the draft layer as one batch ([B, T, H]).
- The lm_head runs only on the rows that are scored (loss-masked rows with a label).
- After each sample, a wiring that is clearly worse than the leader on the positions seen so far
  (a paired test on the same positions) is dropped; the named wirings (configured, train, serve)
  are always evaluated to the end, since the report quotes their margins.

Ranking: hits first (all complete wirings count the same positions), then the mean log-probability
of the true token, which breaks ties when a draft hits almost nothing (random weights).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from inspector.doctor.stats import paired_hits_z, paired_logp_z
from inspector.draft import Draft
from inspector.errors import InputError
from inspector.evaluate import Evaluator
from inspector.evaluate.scoring import Vocab, score_logits
from inspector.metrics import Counts
from inspector.model import Step0Shared, draft_logits, iter_steps, step0_logits_at_rows
from inspector.progress import StageProgress
from inspector.wiring import Wiring

EXHAUSTIVE_MAX_SLOTS = 6  # beyond this many slots the search is greedy
Z_HITS = 4.0  # paired z on hits above which a wiring is dropped as hopeless
Z_LOGP = 6.0  # paired z on true-token log-prob, used only while hits do not separate
BATCH_BYTES = 768 * 2**20  # working memory of one batch of wirings through the layer


def all_wirings(n_slots: int, n_blocks: int) -> list[tuple[int, ...]]:
    """Every ordered choice of n_blocks distinct slots out of n_slots."""
    return list(itertools.permutations(range(n_slots), n_blocks))


def neighbours(w: tuple[int, ...], n_slots: int) -> list[tuple[int, ...]]:
    """Wirings one move from w: one block takes another slot (swapping if that slot is in use)."""
    out: list[tuple[int, ...]] = []
    for b in range(len(w)):
        for s in range(n_slots):
            if s == w[b]:
                continue
            new = list(w)
            if s in w:
                new[w.index(s)] = w[b]
            new[b] = s
            t = tuple(new)
            if t not in out:
                out.append(t)
    return out


# --- scoring ----------------------------------------------------------------------------------
@dataclass
class SampleScore:
    """Per scored position of one sample: hit (pred target id == true token), log p(true)."""

    hit: np.ndarray  # bool [M]
    logp: np.ndarray  # float32 [M], nan where the true token is outside the draft vocab
    pred: np.ndarray | None = None  # predicted target id [M], -1 where not computed (OOV rows)


class Scorer:
    """Scores wirings on one sample at a time, batched through the draft layer.

    draft: an alternative draft (same fc, other config) to run instead of `ev.draft`.
    shift: re-pair hidden states and tokens: row j uses the slots at j + shift with token x_{j+1}
      and predicts x_{j+2} (0 is the standard pairing of every trainer).
    count_from: first row j that counts (1 lets shifts -1, 0, +1 count the same rows).
    Counted rows: loss_mask[j+1] set and a label x_{j+2} present, as in `Evaluator.predict`.
    """

    def __init__(
        self,
        ev: Evaluator,
        *,
        draft: Draft | None = None,
        shift: int = 0,
        count_from: int = 0,
        batch_bytes: int = BATCH_BYTES,
    ) -> None:
        self.ev = ev
        self.draft = draft if draft is not None else ev.draft
        self.shift = shift
        self.count_from = count_from
        self.batch_bytes = batch_bytes
        dev = ev.device
        self._vocab = Vocab.of(self.draft.vocab, dev)

    def _batch_size(self, rows: int, scored: int) -> int:
        """Wirings per batch: what fits BATCH_BYTES (attention of the scored rows over all keys,
        MLP and logits of the scored rows, a few [rows, H] tensors per wiring)."""
        cfg = self.draft.config
        if cfg.num_layers > 1:
            scored = rows  # the full forward runs every row
        per = 4 * (
            3 * cfg.num_heads * scored * rows
            + 3 * scored * cfg.intermediate_size
            + 2 * scored * cfg.draft_vocab_size
            + 8 * rows * cfg.hidden_size
        )
        return max(1, min(32, self.batch_bytes // max(1, per)))

    @torch.inference_mode()
    def score(self, index: int, wirings: Sequence[tuple[int, ...]]) -> list[SampleScore]:
        ev, s = self.ev, self.shift
        sample = ev.samples[index]
        t = sample.length
        j0, j1 = max(0, -s), min(t - 2, t - 1 - s)  # rows with a hidden state and an input token
        last = min(j1, t - 3)  # rows with a label
        first = max(j0, self.count_from)
        if last < first or not wirings:
            empty = SampleScore(np.zeros(0, bool), np.zeros(0, np.float32), np.zeros(0, np.int64))
            return [empty for _ in wirings]
        dev = ev.device
        ids = sample.input_ids.to(dev)
        mask = sample.loss_mask.to(dev).bool()
        rows = torch.arange(first, last + 1, device=dev)
        rows = rows[mask[rows + 1]]
        labels = self._vocab.labels(ids[rows + 2])
        in_vocab = labels.in_vocab
        # A true token outside the draft vocab is a miss whatever the wiring: only the in-vocab
        # rows run past the attention.
        run = (rows - j0)[in_vocab]
        scored = labels.keep(in_vocab)
        m, m_in = int(rows.numel()), int(run.numel())
        inv_np = in_vocab.cpu().numpy()
        tokens = ids[j0 + 1 : j1 + 2]
        r = j1 - j0 + 1
        single = Step0Shared.supports(self.draft)
        shared = (
            Step0Shared(self.draft, tokens, ev.position_offset + j0) if single and m_in else None
        )
        out: list[SampleScore] = []
        bsz = self._batch_size(r, m_in)
        for c in range(0, len(wirings), bsz):
            chunk = wirings[c : c + bsz]
            hit_np = np.zeros((len(chunk), m), bool)
            logp_np = np.full((len(chunk), m), np.nan, np.float32)
            pred_np = np.full((len(chunk), m), -1, np.int64)
            if m_in:
                h = torch.stack(
                    [ev.fc_output(index, Wiring(tuple(w)))[j0 + s : j1 + s + 1] for w in chunk]
                )
                if shared is not None:
                    logits = step0_logits_at_rows(self.draft, shared, h, run)
                else:
                    # Several layers: the full step 0, then norm + lm_head on the scored rows.
                    _, z = next(
                        iter_steps(
                            self.draft,
                            h,
                            tokens.expand(len(chunk), r),
                            steps=1,
                            position_offset=ev.position_offset + j0,
                        )
                    )
                    logits = draft_logits(self.draft, z[:, run])  # [B, M', D]
                sc = score_logits(logits, scored.safe, 1, rank=False)
                pred = self._vocab.to_target[sc.pred]
                hit = pred == scored.true
                logp = sc.true_logp
                hit_np[:, inv_np] = hit.cpu().numpy()
                logp_np[:, inv_np] = logp.cpu().numpy()
                pred_np[:, inv_np] = pred.cpu().numpy()
            out.extend(SampleScore(hit_np[b], logp_np[b], pred_np[b]) for b in range(len(chunk)))
        return out


# --- the search ------------------------------------------------------------------------------
@dataclass
class WiringScores:
    """Per-position scores of one wiring, one array per searched sample."""

    wiring: tuple[int, ...]
    hits: list[np.ndarray] = field(default_factory=list)  # per searched sample
    logp: list[np.ndarray] = field(default_factory=list)
    dropped: bool = False

    def add(self, sc: SampleScore) -> None:
        self.hits.append(sc.hit)
        self.logp.append(sc.logp)

    def arrays(self, k: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        hs, ls = self.hits[:k], self.logp[:k]
        if not hs:
            return np.zeros(0, bool), np.zeros(0, np.float32)
        return np.concatenate(hs), np.concatenate(ls)

    def key(self, k: int | None = None) -> tuple[float, float]:
        h, lp = self.arrays(k)
        finite = lp[np.isfinite(lp)].astype(np.float64)
        mean_lp = float(finite.mean()) if finite.size else -math.inf
        return (float(h.sum()), mean_lp)

    def counts(self) -> Counts:
        h, _ = self.arrays()
        return Counts(int(h.sum()), int(h.size))

    def mean_logp(self) -> float | None:
        _, lp = self.arrays()
        finite = lp[np.isfinite(lp)].astype(np.float64)
        return float(finite.mean()) if finite.size else None


class WiringSearch:
    """Accumulates per-position scores of wirings over the searched samples, dropping hopeless ones.

    One instance per (draft, pairing); `evaluate` may be called repeatedly (the greedy search does),
    wirings already evaluated are not run again.
    """

    def __init__(
        self,
        ev: Evaluator,
        samples: Sequence[int],
        *,
        draft: Draft | None = None,
        shift: int = 0,
        count_from: int = 0,
        prune: bool = True,
        progress: StageProgress | None = None,
        stage: str = "wiring search",
    ) -> None:
        self.ev = ev
        self.samples = list(samples)
        self.scorer = Scorer(ev, draft=draft, shift=shift, count_from=count_from)
        self.prune = prune
        self.progress = progress
        self.stage = stage
        self.state: dict[tuple[int, ...], WiringScores] = {}
        self.skipped: dict[int, str] = {}  # sample index -> why it could not be scored
        self.forwards = 0  # wiring x sample passes through the layer (for the benchmark)
        self._scored: set[int] = set()

    def evaluate(
        self, candidates: Iterable[tuple[int, ...]], protected: Iterable[tuple[int, ...]] = ()
    ) -> None:
        todo = [
            tuple(w)
            for w in dict.fromkeys(tuple(c) for c in candidates)
            if tuple(w) not in self.state
        ]
        keep = {tuple(w) for w in protected}
        for w in todo:
            self.state[w] = WiringScores(w)
        done = 0
        for k, i in enumerate(self.samples):
            if i in self.skipped:
                continue
            active = [w for w in todo if not self.state[w].dropped]
            try:
                scores = self.scorer.score(i, active)
            except InputError as e:
                if i in self._scored:
                    raise  # a sample that scored before cannot fail now
                self.skipped[i] = str(e)
                continue
            self._scored.add(i)
            self.forwards += len(active)
            for w, sc in zip(active, scores, strict=True):
                self.state[w].add(sc)
            done += 1
            if self.prune:
                self._prune(active, done, keep)
            if self.progress is not None:
                self.progress(self.stage, k + 1, len(self.samples))

    def _prune(self, active: list[tuple[int, ...]], n: int, keep: set[tuple[int, ...]]) -> None:
        pool = [a for a in self.state.values() if not a.dropped and len(a.hits) >= n]
        if len(pool) < 2:
            return
        leader = max(pool, key=lambda a: a.key(n))
        lh, ll = leader.arrays(n)
        for w in active:
            acc = self.state[w]
            if w in keep or acc is leader or acc.dropped:
                continue
            h, lp = acc.arrays(n)
            zh = paired_hits_z(lh, h)
            if zh >= Z_HITS:
                acc.dropped = True
            elif h.sum() <= lh.sum() and abs(zh) < 1.0 and paired_logp_z(ll, lp) >= Z_LOGP:
                acc.dropped = True

    def ranked(self) -> list[WiringScores]:
        """Complete wirings by (hits, mean log p), then the dropped ones by accuracy."""
        done = [a for a in self.state.values() if not a.dropped]
        dropped = [a for a in self.state.values() if a.dropped]
        done.sort(key=lambda a: a.key(), reverse=True)
        dropped.sort(key=lambda a: (a.counts().acc or 0.0, a.key()[1]), reverse=True)
        return done + dropped

    def scores(self, w: tuple[int, ...]) -> WiringScores | None:
        return self.state.get(tuple(w))

    def hits(self, w: tuple[int, ...] | None) -> np.ndarray:
        """Per-position hits of w over the searched samples (empty when w was not evaluated)."""
        acc = self.state.get(tuple(w)) if w is not None else None
        return acc.arrays()[0] if acc is not None else np.zeros(0, bool)


def search_wirings(
    ev: Evaluator,
    samples: Sequence[int],
    *,
    protected: Sequence[tuple[int, ...]] = (),
    start: tuple[int, ...] | None = None,
    draft: Draft | None = None,
    shift: int = 0,
    prune: bool = True,
    progress: StageProgress | None = None,
    exhaustive_slots: int | None = None,
) -> WiringSearch:
    """Exhaustive over every ordered choice when S <= `exhaustive_slots` (default
    `EXHAUSTIVE_MAX_SLOTS`), else greedy from `start` (one block at a time, swaps included,
    until no neighbour is better)."""
    n_slots, n_blocks = len(ev.slot_info), ev.n_blocks
    ws = WiringSearch(ev, samples, draft=draft, shift=shift, prune=prune, progress=progress)
    protected = [tuple(p) for p in protected]
    limit = EXHAUSTIVE_MAX_SLOTS if exhaustive_slots is None else exhaustive_slots
    if n_slots <= limit:
        ws.evaluate(all_wirings(n_slots, n_blocks), protected)
        return ws
    current = (
        tuple(start)
        if start is not None
        else (protected[0] if protected else tuple(range(n_blocks)))
    )
    ws.evaluate([current, *protected], protected)
    for _ in range(4 * n_blocks):
        ws.evaluate(neighbours(current, n_slots), [*protected, current])
        best = ws.ranked()[0].wiring
        if best == current:
            break
        current = best
    return ws
