"""A block draft (DFlash, DFlash2) over saved samples, under any wiring the samples hold.

A round after committed x_0..x_n drafts one block: [x_n, mask, ...] at positions n..n+B-1 over
the target's features of rows 0..n-1 (what the target had verified), and block row k drafts
x_{n+k}. Teacher-forced, every anchor n of a generation is one block (`anchored_block_hidden`
runs them together over the sample's context, its fc and keys computed once); per anchor and
block position k: the draft's token (DFlash2: its selector's path), the true one, p of the true
token and its rank. The engines verify the block's prefix: a round accepts the leading drafts
that match, so `metrics.rounds.walk` over those counts gives the accept length an engine logs
(1 + accepted per round, pooled), each engine counting its rounds its own way.

Pure torch over the canonical `Draft`; the views print `BlockReport`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence, Sized
from dataclasses import dataclass, field

import numpy as np
import torch

from inspector.draft import BlockConfig, Draft
from inspector.engines import Engine, engine
from inspector.metrics.rounds import AcceptStats, Round, Run, generation_runs, walk
from inspector.model.block import (
    anchored_block_hidden,
    draft_rows,
    head_logits,
    markov_bias,
    markov_path,
    selector_path,
)
from inspector.sample import Sample
from inspector.wiring import Wiring

# The bytes of one chunk of blocks' attention keys and scores: bounds the memory of a sample
# whatever its length (a 32K-token context and a 150K vocab would not fit in one pass).
CHUNK_BYTES = 256 << 20
# The engines whose count of a round the report gives (vLLM: the rounds as run; SGLang: one
# more after a request's stop, its overlap scheduler's).
COUNTED_BY = (Engine.VLLM, Engine.SGLANG)


def block_of(draft: Draft) -> BlockConfig:
    block = draft.config.block
    if block is None:
        raise ValueError(f"{draft.name}: not a block draft")
    return block


@dataclass(frozen=True)
class BlockPredictions:
    """One sample under one wiring: per anchor (a round's start n) and block position k = 1..B-1
    (column k - 1), the draft's token, the true x_{n+k} (-1 past the sample), p of the true
    token and its rank (0: the draft's top); `scored`: x_{n+k} is a generated token of the run
    the anchor is in (what the accuracy counts). Where the sample carries the target's
    continuation past its stop (`Sample.continuation`, a capture's or the live loop's), `true`
    reads it, `walked` holds the runs as they know it (`Run.known`, how the request stopped) and
    `tail` the leading matches of the blocks after x_E, x_E+1, ...: what the engines count in a
    request's last round and in SGLang's round after the stop, counted in the rounds only (no
    accuracy, no view)."""

    anchors: np.ndarray  # [A] int64
    pred: np.ndarray  # [A, B-1] int64
    true: np.ndarray  # [A, B-1] int64
    p: np.ndarray  # [A, B-1] float32
    rank: np.ndarray  # [A, B-1] int64
    scored: np.ndarray  # [A, B-1] bool
    runs: tuple[tuple[int, int], ...]  # (P, E) of each generation
    length: int  # the sample's tokens and its continuation's
    tail: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    walked: tuple[Run, ...] = ()  # the runs the rounds walk (empty: `runs`, nothing past E)

    @property
    def hit(self) -> np.ndarray:
        return (self.pred == self.true) & (self.true >= 0)

    def accept_by_start(self) -> np.ndarray:
        """a_by_start [T]: the leading drafts of the block after x_n that match (0 where no
        block was drafted)."""
        a = np.zeros(self.length, dtype=np.int64)
        lead = np.cumprod(self.hit, axis=1).sum(axis=1)
        a[self.anchors] = lead
        if len(self.tail):
            e = self.runs[-1][1]
            a[e : e + len(self.tail)] = self.tail
        return a

    def round_list(self, which: Engine) -> list[Round]:
        """The rounds `which` takes through the sample's generations, in order."""
        depth = self.pred.shape[1]
        runs = self.walked or tuple(Run.of(r) for r in self.runs)
        return walk(self.accept_by_start(), runs, depth=depth, engine=which)

    def rounds(self, which: Engine) -> AcceptStats:
        return AcceptStats.of(self.round_list(which), self.pred.shape[1])


def context_of(sample: Sample, wiring: Wiring, draft: Draft) -> torch.Tensor:
    """The sample's features at the wired slots, concatenated in fc block order [T, N*Ht]."""
    return torch.cat([sample.slots[i] for i in wiring.slots], dim=-1).to(
        device=draft.device, dtype=draft.dtype
    )


def drafts_of(block: BlockConfig, rows: int) -> int:
    """The drafts a block of `rows` rows holds: every row where the anchor's drafts too
    (DSpark's `anchor_drafts`), else rows - 1."""
    return rows if block.anchor_drafts else rows - 1


def anchors_of(runs: Sequence[tuple[int, int]]) -> list[int]:
    """Every n a round may start after: P..E-1 of each generation x_P..x_E."""
    return [n for p, e in runs for n in range(p, e)]


def chunk_size(draft: Draft, length: int, width: int | None = None) -> int:
    """How many blocks of `width` rows (default the block size) over a context of `length`
    rows run in one pass (`CHUNK_BYTES`)."""
    cfg = draft.config
    b = width or block_of(draft).block_size
    per_block = (length + b) * (2 * cfg.num_kv_heads * cfg.head_dim + cfg.num_heads * b) * 4
    per_block += b * cfg.vocab_size * 4 * 3  # the logits, their log-softmax and a compare
    return max(1, CHUNK_BYTES // per_block)


@torch.no_grad()
def predict_blocks(
    draft: Draft, sample: Sample, wiring: Wiring, width: int | None = None
) -> BlockPredictions:
    """Every block a round could draft over `sample`'s generations, under `wiring`. `width`:
    the rows of the block a round runs, the anchor's included (default the draft's block_size;
    an engine run with num_speculative_tokens K runs K + 1)."""
    block = block_of(draft)
    b = width or block.block_size
    n_drafts = drafts_of(block, b)
    ids = sample.input_ids.to(draft.device)
    context = context_of(sample, wiring, draft)
    runs = sample_runs(sample)
    anchors = anchors_of([(r.start, r.end) for r in runs])
    tail_at: list[int] = []
    cont = sample.continuation
    if cont is not None and runs and runs[-1].known > runs[-1].end:
        # the blocks after x_E.. read the continuation's tokens and features (the rows the
        # target had verified when an engine drafted there)
        tail_at = list(range(runs[-1].end, runs[-1].known))
        ids = torch.cat([ids, cont.ids.to(draft.device)])
        more = torch.cat([cont.slots[i] for i in wiring.slots], dim=-1)
        context = torch.cat([context, more.to(device=draft.device, dtype=draft.dtype)])
    total = ids.shape[0]
    in_run = np.zeros(total, dtype=np.int64)  # the run end E of each position's run, -1 outside
    in_run[:] = -1
    for r in runs:
        in_run[r.start : r.end + 1] = r.end
    every = anchors + tail_at
    preds, trues, ps, ranks = [], [], [], []
    step = chunk_size(draft, total, b)
    offsets = torch.arange(1, n_drafts + 1, device=draft.device)
    for lo in range(0, len(every), step):
        at = torch.tensor(every[lo : lo + step], device=draft.device)
        block_ids = torch.full((len(at), b), block.mask_token_id, device=draft.device)
        block_ids[:, 0] = ids[at]
        normed = draft_rows(draft, anchored_block_hidden(draft, context, at, block_ids))
        logits = head_logits(draft, normed)
        where = at[:, None] + offsets[None, :]
        true = torch.where(where < total, ids[where.clamp(max=total - 1)], -1)
        if block.markov_rank:
            # DSpark: the proposal picks each draft after the one before it; p and rank are the
            # draft's logits plus the bias of the true token before it (x_{n+j} for draft j)
            pred = markov_path(draft, normed, logits, block_ids[:, 0])
            logits = logits + markov_bias(draft, ids[(where - 1).clamp(max=total - 1)], normed)
        elif block.family == "dflash2":
            pred = selector_path(draft, normed, logits, block_ids[:, 0])
        else:
            pred = logits.argmax(-1)
        logp = torch.log_softmax(logits, dim=-1)
        safe = true.clamp(min=0)
        at_true = logits.gather(-1, safe[..., None])
        preds.append(pred.cpu())
        trues.append(true.cpu())
        ps.append(logp.gather(-1, safe[..., None])[..., 0].exp().cpu())
        ranks.append((logits > at_true).sum(-1).cpu())
    width = n_drafts
    if every:
        pred_a, true_a = torch.cat(preds).numpy(), torch.cat(trues).numpy()
        p_a, rank_a = torch.cat(ps).float().numpy(), torch.cat(ranks).numpy()
    else:
        pred_a = true_a = rank_a = np.zeros((0, width), dtype=np.int64)
        p_a = np.zeros((0, width), dtype=np.float32)
    na = len(anchors)
    tail_hit = (pred_a[na:] == true_a[na:]) & (true_a[na:] >= 0)
    tail = np.cumprod(tail_hit, axis=1).sum(axis=1).astype(np.int64)
    pred_a, true_a, p_a, rank_a = pred_a[:na], true_a[:na], p_a[:na], rank_a[:na]
    anchor_a = np.asarray(anchors, dtype=np.int64)
    where_a = anchor_a[:, None] + np.arange(1, n_drafts + 1)[None, :]
    scored = where_a <= in_run[anchor_a][:, None] if len(anchor_a) else np.zeros_like(pred_a, bool)
    pairs = tuple((r.start, r.end) for r in runs)
    return BlockPredictions(
        anchor_a, pred_a, true_a, p_a, rank_a, scored, pairs, total, tail, tuple(runs)
    )


def sample_runs(sample: Sample) -> list[Run]:
    """The sample's generation runs, each knowing how far the target's continuation is known:
    to its own end, and for a run that ends the sample, through the continuation it carries
    (as the EAGLE replay's `serving.sample_replay.sample_runs` reads it)."""
    t = sample.length
    cont = sample.continuation
    out = []
    for p, e in generation_runs(sample.loss_mask.cpu().numpy()):
        if cont is not None and e == t - 1:
            out.append(Run(p, e, e + cont.length, cont.finish))
        else:
            out.append(Run(p, e, e))
    return out


@dataclass
class BlockWiringReport:
    """One wiring's figures over the samples evaluated."""

    name: str | None
    label: str
    slots: tuple[int, ...]
    layers: tuple[int | None, ...]  # the HF index each fc block reads, where the samples say
    block_size: int  # the rows a round runs, the anchor's included
    engines: tuple[Engine, ...] = COUNTED_BY  # whose counts of the rounds `stats` holds
    hits: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # [B-1]
    counts: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    p_sum: np.ndarray = field(default_factory=lambda: np.zeros(0))
    top5: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    stats: dict[Engine, AcceptStats] = field(default_factory=dict)
    per_sample: list[dict] = field(default_factory=list)
    positions: list[dict] = field(default_factory=list)
    drafts: int | None = None  # the drafts a block holds (None: block_size - 1)

    def __post_init__(self) -> None:
        w = self.drafts or self.block_size - 1
        self.hits = np.zeros(w, dtype=np.int64)
        self.counts = np.zeros(w, dtype=np.int64)
        self.p_sum = np.zeros(w)
        self.top5 = np.zeros(w, dtype=np.int64)
        self.stats = {e: AcceptStats(w) for e in self.engines}

    def add(self, index: int, path: str, bp: BlockPredictions, positions: bool) -> None:
        s = bp.scored
        self.hits += (bp.hit & s).sum(axis=0)
        self.counts += s.sum(axis=0)
        self.p_sum += np.where(s, bp.p, 0.0).sum(axis=0)
        self.top5 += ((bp.rank < 5) & s).sum(axis=0)
        row: dict = {"sample": index, "path": path, "blocks": int(len(bp.anchors))}
        for e in self.engines:
            rounds = bp.round_list(e)
            st = AcceptStats.of(rounds, bp.pred.shape[1])
            self.stats[e].add(st)
            row[f"accept_length_{e.value}"] = st.accept_length
            # each counted round's accepted drafts, in order: what vLLM's per-request
            # spec_decode_metrics.per_step_accepted lists, so a request compares round by round
            row[f"accepted_{e.value}"] = [r.accepted for r in rounds if r.is_draft]
        n = int(s.sum())
        row["accuracy"] = float((bp.hit & s).sum() / n) if n else None
        self.per_sample.append(row)
        if positions:
            for j, n_at in enumerate(bp.anchors.tolist()):
                self.positions.append(
                    {
                        "sample": index,
                        "anchor": n_at,
                        "pred": bp.pred[j].tolist(),
                        "true": bp.true[j].tolist(),
                        "p": [float(x) for x in bp.p[j]],
                        "rank": bp.rank[j].tolist(),
                        "scored": bp.scored[j].tolist(),
                    }
                )

    @property
    def accuracy(self) -> list[float | None]:
        """[k-1]: the share of blocks whose draft at position k is the true token."""
        return [float(h / c) if c else None for h, c in zip(self.hits, self.counts, strict=True)]

    @property
    def mean_p(self) -> list[float | None]:
        """[k-1]: the mean p of the true token at block position k, over the scored blocks."""
        return [float(p / c) if c else None for p, c in zip(self.p_sum, self.counts, strict=True)]

    @property
    def mean_accuracy(self) -> float | None:
        n = int(self.counts.sum())
        return float(self.hits.sum() / n) if n else None

    def accept_length(self, which: Engine = Engine.VLLM) -> float | None:
        return self.stats[which].accept_length

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "label": self.label,
            "slots": list(self.slots),
            "layers": list(self.layers),
            "accuracy": self.mean_accuracy,
            "by_block_position": [
                {
                    "position": k + 1,
                    "scored": int(self.counts[k]),
                    "accuracy": self.accuracy[k],
                    "mean_p": self.mean_p[k],
                    "top5": float(self.top5[k] / self.counts[k]) if self.counts[k] else None,
                }
                for k in range(len(self.hits))
            ],
            "accept_length": {
                e.value: {
                    "value": st.accept_length,
                    "rounds": st.rounds,
                    "accepted": st.accepted,
                    "per_depth": st.per_depth,
                    "lower_bound": st.is_bound,
                    "counted_as": engine(e).conventions.get("logged_as"),
                }
                for e, st in self.stats.items()
            },
            "per_sample": self.per_sample,
            **({"positions": self.positions} if self.positions else {}),
        }


@dataclass
class BlockReport:
    draft: str
    family: str
    block_size: int
    samples: int
    wirings: list[BlockWiringReport]
    skipped: list[dict] = field(default_factory=list)
    drafts: int | None = None  # the drafts a block holds (None: block_size - 1)

    def to_dict(self) -> dict:
        return {
            "draft": self.draft,
            "family": self.family,
            "block_size": self.block_size,
            "drafts": self.drafts or self.block_size - 1,
            "samples": self.samples,
            "wirings": [w.to_dict() for w in self.wirings],
            "skipped": self.skipped,
        }


def evaluate_blocks(
    draft: Draft,
    samples: Iterable[tuple[int, Sample]],
    wirings: Sequence[tuple[str | None, Wiring]],
    *,
    positions: bool = False,
    progress: Callable[[int, int], None] | None = None,
    engines: Sequence[Engine] = COUNTED_BY,
    width: int | None = None,
    slot_info: Sequence | None = None,
) -> BlockReport:
    """Every wiring over every sample; `samples` as (index, Sample), iterated once: each sample
    is scored under every wiring and dropped (an iterable that reads them lazily keeps one in
    memory). `slot_info`: the samples' slots (default the first sample's, `samples` then a
    sequence); `progress(done, total)` after each sample (total: `len(samples)` where it has
    one). `engines`: whose counts of the rounds each wiring keeps; `width`: the rows a round
    runs (`predict_blocks`)."""
    block = block_of(draft)
    b = width or block.block_size
    if slot_info is None:
        seq = samples if isinstance(samples, Sequence) else list(samples)
        samples, slot_info = seq, (seq[0][1].slot_info if seq else [])
    infos = list(slot_info)
    total = len(samples) if isinstance(samples, Sized) else 0
    reports = []
    for name, w in wirings:
        label = w.label(infos)
        layers = tuple(infos[i].hf_index if i < len(infos) else None for i in w.slots)
        reports.append(
            BlockWiringReport(
                name, label, w.slots, layers, b, tuple(engines), drafts=drafts_of(block, b)
            )
        )
    done = 0
    for index, sample in samples:
        done += 1
        for (_, w), rep in zip(wirings, reports, strict=True):
            rep.add(index, sample.path, predict_blocks(draft, sample, w, b), positions)
        del sample
        if progress is not None:
            progress(done, max(total, done))
    return BlockReport(draft.name, block.family, b, done, reports, drafts=drafts_of(block, b))


def load_block(
    checkpoint: str,
    samples: Sequence[str],
    *,
    target: str | None = None,
    embed: str | None = None,
    device: str = "auto",
    dtype: str = "auto",
    dspark: bool = False,
):
    """(draft, SampleSet) of a block draft and its samples: the draft with the target's
    embedding and head, the samples checked against its vocabulary and target width.
    `dspark`: the caller takes a DSpark draft (eval runs its slots and Markov head, the doctor
    reads its config); the others (accept, reconcile, the app) are not wired to them yet: one
    line naming the field that marks it."""
    from pathlib import Path

    from inspector.errors import InputError
    from inspector.evaluate.device import resolve_device
    from inspector.formats import SampleSet, load_block_draft
    from inspector.formats.block_dspark import DSPARK_FORWARD_MISSING
    from inspector.formats.layer_convention import target_layer_count

    dev = resolve_device(device)
    draft = load_block_draft(checkpoint, embed=embed, target=target, dtype=dtype, device=dev)
    cfg = draft.config
    block = cfg.block
    if not dspark and block is not None and block.family == "dspark":
        raise InputError(Path(draft.path) / "config.json", block.marker, DSPARK_FORWARD_MISSING)
    n_layers = target_layer_count(target) if target is not None else None
    sample_set = SampleSet(
        list(samples),
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.target_hidden_size,
        num_layers=n_layers,
    )
    return draft, sample_set
