"""The serving replay over an `Evaluator`'s samples: per sample and wiring, the rounds an engine
would take and what it would log for them, pooled per wiring like the engines' logs.

A chain (topk 1) needs no forward of its own: a chain step that follows accepted tokens is fed
exactly what teacher-forced TTT feeds (the draft's own output and the true token), so a round's
accepted count is the run of leading TTT hits at its row - the evaluator's predictions give it.
A tree needs the forwards of the nodes off the realised path too (`tree_forward`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from inspector.cache import ByteLRU
from inspector.engines import Engine, conventions, default_engine
from inspector.evaluate import Evaluator
from inspector.evaluate.device import retry_oom
from inspector.evaluate.report import RunReport
from inspector.formats.sample_set import SkippedSample
from inspector.metrics import Counts
from inspector.metrics.rounds import AcceptStats, chain_accepts, generation_runs
from inspector.model import fc_wired
from inspector.serving.expectation import Expectation
from inspector.serving.sample_replay import SampleReplay, sample_runs
from inspector.serving.sampling_settings import SamplingSettings
from inspector.serving.spec import DraftSpec
from inspector.serving.tree_forward import chain_accepts_forward, tree_accepts_many
from inspector.wiring import Wiring, named_label

__all__ = [
    "AcceptReport",
    "Replayer",
    "SampleReplay",
    "WiringAccept",
    "off_target_counts",
    "round_starts",
    "sample_runs",
]


def round_starts(loss_mask: np.ndarray) -> np.ndarray:
    """Every n a round can start after (x_0..x_n committed) inside a generation run (P, E):
    P..E-1. The walk reads a_by_start there only, so the replay drafts nowhere else."""
    runs = generation_runs(loss_mask)
    if not runs:
        return np.zeros(0, dtype=np.int64)
    return np.concatenate([np.arange(p, e, dtype=np.int64) for p, e in runs])


def off_target_counts(
    ids: np.ndarray, loss_mask: np.ndarray, verifier_argmax: np.ndarray
) -> Counts:
    """Of the generated positions (every run's tokens), those whose token is not the target's
    argmax after the tokens before it: there the sample is not what the target would emit."""
    off = total = 0
    for p, e in generation_runs(loss_mask):
        pos = np.arange(p, e + 1)
        total += pos.size
        off += int((verifier_argmax[pos - 1] != ids[pos]).sum())
    return Counts(off, total)


@dataclass
class WiringAccept:
    wiring: Wiring
    label: str
    depth: int
    per_sample: list[SampleReplay] = field(default_factory=list)
    name: str | None = None  # a preset's name, "configured"; None for a wiring given by slots

    @property
    def stats(self) -> AcceptStats:
        total = AcceptStats(self.depth)
        for s in self.per_sample:
            total.add(s.stats)
        return total

    @property
    def off_target(self) -> Counts | None:
        parts = [s.off_target for s in self.per_sample if s.off_target is not None]
        if not parts:
            return None
        return Counts(sum(c.hits for c in parts), sum(c.total for c in parts))

    @property
    def expectation(self) -> Expectation | None:
        """The pooled expectation under the verification rule, where every request's rounds
        carry their odds (the live loop at a temperature); else None."""
        if not self.per_sample or any(s.odds is None for s in self.per_sample):
            return None
        return Expectation.of(
            [s.odds for s in self.per_sample if s.odds is not None],
            [s.accepted for s in self.per_sample],
            self.depth,
        )

    @property
    def lower_bound_requests(self) -> int:
        """Requests whose last round ran past what the sample knows of the target's
        continuation: their count, and so the pooled accept length, is a lower bound."""
        return sum(bool(s.bounded.any()) for s in self.per_sample)

    def to_dict(self) -> dict:
        st = self.stats
        d = {
            "wiring": list(self.wiring.slots),
            "label": self.label,
            "rounds": st.rounds,
            "accepted": st.accepted,
            "emitted": st.emitted,
            "accept_length": st.accept_length,
            "accept_length_is_lower_bound": st.is_bound,
            "lower_bound_requests": self.lower_bound_requests,
            "emitted_per_round": st.emitted_per_round,
            "rounds_after_stop": st.after_stop,
            "accepted_per_pos": list(st.at_least),
            "per_depth": st.per_depth,
            "by_position": st.by_position(),
            # vLLM's rejection_sample_method "synthetic" takes these (unconditional per-position
            # rates, non-increasing), so a throughput benchmark runs at the predicted acceptance.
            "synthetic_acceptance_rates": [round(x or 0.0, 6) for x in st.per_depth],
            "per_sample": [s.to_dict() for s in self.per_sample],
        }
        if st.undrafted:
            # rounds that drafted nothing (llama.cpp's early stop, a schedule's 0): no drafts
            d["rounds_without_draft"] = st.undrafted
        off = self.off_target
        if off is not None:
            d["off_target"] = {"positions": off.hits, "total": off.total, "share": off.acc}
        exp = self.expectation
        if exp is not None:
            d["expected"] = exp.to_dict()
        return d


@dataclass(kw_only=True)
class AcceptReport(RunReport):
    """`accept`'s report: per wiring, the engine's rounds replayed (or run live)."""

    spec: DraftSpec
    mode: str  # "replay" | "live"
    wirings: list[WiringAccept]
    engine: Engine = Engine.VLLM
    sampling: SamplingSettings | None = None  # the live loop's; None: greedy replay
    # SGLang's overlap scheduler: its round after each request's stop is counted (its default
    # on GPUs); False: `without_overlap_rounds`, as SGLang runs on CPU
    overlap: bool = True
    # the block draft's family ("dflash", "dflash2") where the live loop ran one: its rounds draft
    # a block of steps + 1 rows, not the EAGLE chain the spec's engine flags select
    family: str | None = None

    def without_overlap_rounds(self) -> AcceptReport:
        """The report as SGLang counts it without its overlap scheduler: every request's round
        after its stop dropped (`SampleReplay.without_overlap_round`)."""
        wirings = [
            replace(wa, per_sample=[s.without_overlap_round() for s in wa.per_sample])
            for wa in self.wirings
        ]
        return replace(self, wirings=wirings, overlap=False)

    def to_dict(self) -> dict:
        config = {**self.spec.to_dict(), "mode": self.mode, "engine": self.engine.value}
        if self.engine.overlap_round:
            config["overlap_scheduler"] = self.overlap
        if self.sampling is not None:
            config["sampling"] = self.sampling.to_dict()
        if self.family is not None:
            config["family"] = self.family
        return {
            "config": config,
            "conventions": conventions(self.engine),
            **self.run_dict(),
            "wirings": [w.to_dict() for w in self.wirings],
            **self.skipped_dict(),
        }


class Replayer:
    """Replays an engine's rounds over the evaluator's samples under any wiring.

    A chain reuses the evaluator's TTT predictions when it runs at least `spec.steps` steps;
    otherwise (and for trees) the draft trees are computed here. Results are cached by bytes
    under the budget's `replays` share (the app asks again for what it shows).
    """

    def __init__(self, ev: Evaluator, spec: DraftSpec, engine: Engine | None = None) -> None:
        self.ev = ev
        self.spec = spec
        self._engine = engine
        self._cache: ByteLRU[tuple[int, tuple[int, ...], DraftSpec, Engine], SampleReplay] = (
            ByteLRU(ev.budget.host_share("replays"))
        )

    @property
    def engine(self) -> Engine:
        """The convention given, else the settings' own (vLLM for a chain, SGLang for a tree):
        a caller that changes `spec` gets the matching one."""
        return self._engine if self._engine is not None else default_engine(self.spec.is_chain)

    def a_by_start(self, index: int, wiring: Wiring, *, keep: bool = True) -> np.ndarray:
        """What a round starting after x_n accepts, at every n a round can start after
        (`round_starts`); 0 at every other n, where no round starts. With the sample's
        continuation past its stop, [T + C]: the rounds whose drafts reach past x_T-1, and
        SGLang's round after the stop, are drafted over the continuation too."""
        return self.a_by_starts(index, wiring, [self.spec], keep=keep)[0]

    def a_by_starts(
        self, index: int, wiring: Wiring, specs: Sequence[DraftSpec], *, keep: bool = True
    ) -> list[np.ndarray]:
        """`a_by_start` under each of `specs` (one topk and kv mode: a sweep's group), each
        equal to a replay with that spec, from one pass: the chains within the evaluator's TTT
        steps read its predictions (a shorter chain is their prefix), the rest select their
        trees from the deepest setting's beam."""
        ev = self.ev
        sample = ev.samples[index]
        starts = round_starts(sample.loss_mask.numpy())
        h = None  # the fc output: computed once for both tree passes
        zeros = np.zeros(sample.length, dtype=np.int64)
        out: list[np.ndarray] = [zeros] * len(specs)
        ttt = [i for i, s in enumerate(specs) if s.is_chain and ev.ttt_steps >= s.steps]
        if ttt:
            preds = ev.predict(index, wiring, keep=keep)
            for i in ttt:
                hits = [sp.hit for sp in preds.steps[: specs[i].steps]]
                every = chain_accepts(hits, sample.length)
                out[i] = zeros.copy()
                out[i][starts] = every[starts]
        rest = [i for i in range(len(specs)) if i not in ttt]
        if rest and sample.length >= 2 and starts.size:
            h = ev.fc_output(index, wiring)
            drafted = self._trees(h, sample.input_ids, starts, [specs[i] for i in rest])
            for i, a in zip(rest, drafted, strict=True):
                out[i] = a
        cont = sample.continuation
        runs = generation_runs(sample.loss_mask.numpy())
        # only a run that ends the sample goes on into the continuation
        if cont is None or cont.length == 0 or not runs or runs[-1][1] != sample.length - 1:
            return out
        if h is None:
            h = ev.fc_output(index, wiring)
        return self._past_stop(index, wiring, h, out, starts, specs)

    def _past_stop(
        self,
        index: int,
        wiring: Wiring,
        fc: torch.Tensor,
        a: list[np.ndarray],
        starts: np.ndarray,
        specs: Sequence[DraftSpec],
    ) -> list[np.ndarray]:
        """`a` (one per spec) extended over the continuation: the rounds after x_n with
        n + steps > T - 1 (their drafts reach past the request) and every n from T - 1 to
        T - 1 + steps (where SGLang's round after the stop can start), drafted over the request's
        rows and the continuation's. The deepest spec's starts hold every shallower one's: one
        pass drafts them all, each spec keeps its own."""
        ev = self.ev
        sample = ev.samples[index]
        cont = sample.continuation
        assert cont is not None
        t, c = sample.length, cont.length
        dev = ev.device
        tail = fc_wired(ev.draft, [cont.slots[s].to(dev, ev.draft.dtype) for s in wiring.slots])
        h = torch.cat([fc, tail])
        ids = torch.cat([sample.input_ids, cont.ids]).to(dev)

        def wanted(steps: int) -> np.ndarray:
            late = starts[starts >= t - steps]
            # SGLang's round after the stop starts after the last round's whole path and bonus:
            # at x_T-1 (the bonus was the request's last token) up to x_T-1+steps
            after = np.arange(t - 1, min(t + c, t + steps), dtype=np.int64)
            return np.unique(np.concatenate([late, after]))

        want = wanted(max(s.steps for s in specs))
        drafted = self._trees(h, ids, want, specs) if want.size else [None] * len(specs)
        out = []
        for spec, ai, di in zip(specs, a, drafted, strict=True):
            o = np.zeros(t + c, dtype=np.int64)
            o[:t] = ai
            mine = wanted(spec.steps)
            if di is not None and mine.size:
                o[mine] = di[mine]
            out.append(o)
        return out

    def _trees(
        self, h: torch.Tensor, ids: torch.Tensor, starts: np.ndarray, specs: Sequence[DraftSpec]
    ) -> list[np.ndarray]:
        """a_by_start at `starts` under each spec (one topk) from the batched tree forward (fc
        output `h`, tokens `ids`), under the evaluator's chunking and its out-of-memory retries,
        on the CPU."""
        ev = self.ev
        dev = ev.device
        parallel_chain = ev.draft.config.parallel is not None and all(s.is_chain for s in specs)
        # A P-EAGLE chain over the rows past the stop: its depths read no other depth's draft, so
        # teacher-forced TTT over the request and its continuation is the round (the tree
        # forward drafts sequentially and refuses a parallel draft). It scores every row; only
        # the wanted starts are kept, as the tree pass computes them alone.
        forward = chain_accepts_forward if parallel_chain else tree_accepts_many
        rows = {} if parallel_chain else {"starts": torch.from_numpy(starts).to(dev)}
        outs = retry_oom(
            lambda chunking: forward(
                ev.draft,
                h,
                ids.to(dev),
                specs,
                position_offset=ev.position_offset,
                chunking=chunking,
                **rows,
            ),
            ev.chunking,
            dev,
        )
        if not parallel_chain:
            return [o.cpu().numpy() for o in outs]
        kept = []
        for o in outs:
            a = np.zeros(o.shape[0], dtype=np.int64)
            a[starts] = o.cpu().numpy()[starts]
            kept.append(a)
        return kept

    def replay(self, index: int, wiring: Wiring, *, keep: bool = True) -> SampleReplay:
        key = (index, wiring.slots, self.spec, self.engine)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        a = self.a_by_start(index, wiring, keep=keep)
        result = self.sample_replay(index, a, self.spec, self.engine)
        return self._cache.put(key, result) if keep else result

    def sample_replay(
        self, index: int, a: np.ndarray, spec: DraftSpec, engine: Engine
    ) -> SampleReplay:
        """The rounds `engine` takes through sample `index` under `spec`, given its
        a_by_start `a`, with the generated positions off the target's argmax (with a head)."""
        ev = self.ev
        sample = ev.samples[index]
        mask = sample.loss_mask.numpy().astype(bool)
        off = None
        verifier = ev.verifier_argmax(index)
        if verifier is not None:
            off = off_target_counts(sample.input_ids.numpy(), mask, verifier[0])
        return SampleReplay.of(
            index,
            sample.path,
            a,
            mask,
            spec.steps,
            off,
            continuation=sample.continuation,
            engine=engine,
            category=sample.category,
        )

    def run(
        self,
        wirings: Sequence[Wiring],
        *,
        limit: int | None = None,
        names: Sequence[str | None] | None = None,
        indices: Sequence[int] | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> AcceptReport:
        ev = self.ev
        n = len(ev.samples) if limit is None else min(limit, len(ev.samples))
        todo = list(range(n)) if indices is None else [i for i in indices if i < n]
        out = [
            WiringAccept(w, named_label(w, ev.slot_info, nm), self.spec.steps, name=nm)
            for w, nm in zip(wirings, names or [None] * len(wirings), strict=True)
        ]
        skipped: list[SkippedSample] = []

        def replay(i: int) -> list[SampleReplay]:
            return [self.replay(i, w, keep=False) for w in wirings]

        with torch.inference_mode():
            for _, results in ev.each_sample(todo, replay, skipped, progress):
                for wa, r in zip(out, results, strict=True):
                    wa.per_sample.append(r)
        return AcceptReport(
            **AcceptReport.fields_of(ev, todo, skipped),
            spec=self.spec,
            mode="replay",
            wirings=out,
            engine=self.engine,
        )
