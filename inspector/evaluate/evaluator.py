"""The Evaluator: runs a draft over a sample set, one sample at a time, in bounded memory.

fc is linear, so fc(cat(s_a, s_b, s_c)) = W0 s_a + W1 s_b + W2 s_c: each (block, slot) projection is
computed once per sample and any wiring is a sum of cached projections. Only the layer after fc
runs again when the wiring changes.

Memory: what is kept between samples sits in byte-bounded caches (`inspector.cache.ByteLRU`, sized
by a `MemoryBudget`); the working memory of one sample is linear in its length (the attention never
builds a [T, T] matrix, the logits are computed in row chunks and reduced to per-row numbers at
once). When the device runs out of memory, the sample is retried with smaller chunks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

import numpy as np
import torch

from inspector.cache import ByteLRU
from inspector.draft import Draft
from inspector.errors import InputError, setting_field
from inspector.evaluate.device import retry_oom
from inspector.evaluate.positions import PositionList, PositionSink
from inspector.evaluate.predictions import (
    TOP_K,
    SamplePredictions,
    StepPredictions,
    chain_accept_stats,
    step_metrics,
)
from inspector.evaluate.report import Report, SkippedSample, WiringReport
from inspector.evaluate.scoring import RowScores, Vocab, score_logits
from inspector.formats.sample_set import SampleSet, SampleWarning, check_width
from inspector.formats.samples import FLOAT16_MAX
from inspector.formats.target_tensors import TargetHead
from inspector.memory import TRIM_FREE_BYTES, HeapTrimmer, MemoryBudget, resolve_budget
from inspector.metrics import StepMetrics, sum_steps
from inspector.metrics.rounds import AcceptStats
from inspector.model import (
    DEFAULT_CHUNKING,
    Chunking,
    draft_logits,
    fc_block_project,
    fc_combine,
    fc_input,
    fc_project,
    iter_steps,
)
from inspector.model.linear import linear
from inspector.sample import SlotInfo, with_layer_ids
from inspector.wiring import Wiring, configured_layers, named_label, parse_wiring

T = TypeVar("T")


class Evaluator:
    """Runs a draft over a sample set, caching per-sample projections and per-wiring predictions.

    Not thread-safe by design: one thread (the app's worker, or the CLI) owns the device.
    """

    def __init__(
        self,
        draft: Draft,
        samples: SampleSet,
        *,
        ttt_steps: int = 1,
        target_head: TargetHead | None = None,
        position_offset: int = 1,
        budget: MemoryBudget | None = None,
        slot_layers: Sequence[int] | None = None,
    ) -> None:
        if ttt_steps < 1:
            raise InputError(None, setting_field("ttt-steps"), "must be at least 1")
        self.draft = draft
        self.samples = samples
        self.ttt_steps = ttt_steps
        self.device = draft.device
        self.target_head = target_head.to(self.device) if target_head is not None else None
        self.position_offset = position_offset
        self.budget = budget if budget is not None else resolve_budget(None, self.device)
        self.chunking = DEFAULT_CHUNKING
        # HF index of every slot, overriding data_config.json (--slot-layers).
        self.slot_layers = tuple(int(k) for k in slot_layers) if slot_layers is not None else None
        # per sample and slot: what converting to the evaluation dtype did to it
        self._dtype_warnings: dict[int, dict[int, str]] = {}
        self._vocab = Vocab.of(draft.vocab, self.device)
        self._linear_fc = not draft.config.norm_before_fc
        # Each fc block as its own row-major [H, Ht] copy, used as `slot @ W.T`: a strided column
        # slice would be gathered on every matmul, and a transposed copy is the slow CPU layout
        # in bfloat16/float16.
        self._fc_blocks = [draft.fc_block(b).contiguous() for b in range(self.n_blocks)]
        b = self.budget
        self._trim_heap = HeapTrimmer(min(TRIM_FREE_BYTES, b.host // 4))
        # The set is ours now: its files are one more cache under the budget, and every slot
        # must have the width the draft's fc takes (not merely the first file's width).
        samples.cache_bytes = b.host_share("samples")
        if samples.hidden_size is None:
            samples.hidden_size = draft.config.target_hidden_size
        self._dev_slots: ByteLRU[tuple[int, int], torch.Tensor] = ByteLRU(
            b.device_share("device_slots")
        )
        self._proj: ByteLRU[tuple[int, int, int], torch.Tensor] = ByteLRU(
            b.device_share("projections")
        )
        self._verifier: ByteLRU[int, tuple[np.ndarray, np.ndarray] | None] = ByteLRU(
            b.host_share("verifier")
        )
        self._preds: ByteLRU[tuple[int, tuple[int, ...], int], SamplePredictions] = ByteLRU(
            b.host_share("predictions")
        )

    def with_samples(self, samples: SampleSet) -> Evaluator:
        """An evaluator of the same draft, settings and head over other samples (a cut view of
        these, for the doctor's budget), with its own caches."""
        return self._like(self.draft, samples)

    def with_draft(self, draft: Draft) -> Evaluator:
        """An evaluator of another draft over the same samples (read once for both), with the
        same settings and head and its own caches: a borrowed-head copy, a second checkpoint."""
        return self._like(draft, self.samples)

    def _like(self, draft: Draft, samples: SampleSet) -> Evaluator:
        ev = Evaluator(
            draft,
            samples,
            ttt_steps=self.ttt_steps,
            position_offset=self.position_offset,
            budget=self.budget,
            slot_layers=self.slot_layers,
        )
        ev.target_head = self.target_head  # already on the device
        ev.chunking = self.chunking
        return ev

    # --- metadata -------------------------------------------------------------------------
    @property
    def n_blocks(self) -> int:
        return self.draft.config.num_fc_blocks

    @property
    def slot_info(self) -> list[SlotInfo]:
        """The samples' slots; with `slot_layers`, their HF indices and labels from it."""
        if self.slot_layers is None:
            return self.samples.slot_info
        return with_layer_ids(self.samples.slot_info, self.slot_layers)

    @property
    def has_verifier(self) -> bool:
        """Whether the trainers' metrics can be computed (they need the verifier's head)."""
        return self.target_head is not None

    def wiring(self, text: str | Sequence[int]) -> Wiring:
        """`text` over the samples' slots; a preset resolves through the draft's configured
        layers (`configured_layers`) by the slots' HF indices."""
        cfg = self.draft.config
        layers = configured_layers(cfg.aux_layer_ids, cfg.aux_layer_convention)
        return parse_wiring(text, self.slot_info, self.n_blocks, layers)

    def cache_bytes(self) -> dict[str, int]:
        """Bytes held per cache (for the benchmarks and the app's status)."""
        return {
            "samples": self.samples.cached_bytes,
            "device_slots": self._dev_slots.bytes,
            "projections": self._proj.bytes,
            "verifier": self._verifier.bytes,
            "predictions": self._preds.bytes,
        }

    # --- per-sample device tensors and caches --------------------------------------------------
    def release(self, index: int) -> None:
        """Drop everything cached for sample `index` but its predictions: the loaded file, its
        slots on the device, its projections and the verifier's argmax. A pass over 10^4 files
        would otherwise fill every share of the budget with samples it never reads again."""
        self._dev_slots.pop_where(lambda k: k[0] == index)
        self._proj.pop_where(lambda k: k[0] == index)
        self._verifier.pop(index)
        self.samples.forget(index)

    def warnings(self, indices: Sequence[int] | None = None) -> list[SampleWarning]:
        """What loading and converting the samples noticed, in sample order: the loader's
        (NaN/Inf, a saturated float16 capture, no loss mask) and the evaluation dtype's."""
        wanted = None if indices is None else set(indices)
        out = [w for w in self.samples.warnings if wanted is None or w.index in wanted]
        for i, by_slot in self._dtype_warnings.items():
            if wanted is None or i in wanted:
                path = str(self.samples.files[i])
                out += [SampleWarning(i, path, by_slot[k]) for k in sorted(by_slot)]
        return sorted(out, key=lambda w: w.index)

    def keep_warm(self, index: int) -> None:
        """Mark sample `index` most recently used in the per-sample caches (device slots, fc
        projections), so background work on other samples (the app's prefetch and set-wide fill)
        does not evict the sample on screen; a no-op for a sample not cached."""
        self._dev_slots.touch_where(lambda key: key[0] == index)
        self._proj.touch_where(lambda key: key[0] == index)

    def _slot(self, index: int, slot: int) -> torch.Tensor:
        def make() -> torch.Tensor:
            s = self.samples[index]
            # The set checks widths as it loads; a set handed over with files already loaded
            # under another width is caught here, by the same rule.
            check_width(s, self.draft.config.target_hidden_size, [slot])
            t = s.slots[slot]
            moved = t.to(self.device, self.draft.dtype, non_blocking=True)
            if moved.dtype == torch.float16 and t.dtype != torch.float16:
                self._check_float16(index, slot, t, moved)
            return moved

        return self._dev_slots.get_or_make((index, slot), make)

    def _check_float16(
        self, index: int, slot: int, stored: torch.Tensor, moved: torch.Tensor
    ) -> None:
        """--dtype float16 on wider stored slots: values past 65504 become inf, silently."""
        if bool(torch.isfinite(moved).all()) or not bool(torch.isfinite(stored).all()):
            return  # fine, or non-finite already (the loader names that)
        peak = float(stored.abs().max())
        self._dtype_warnings.setdefault(index, {})[slot] = (
            f"slot {slot} holds |values| up to {peak:.3g}, beyond float16's {FLOAT16_MAX:g}: "
            "--dtype float16 turns them into inf"
        )

    def _projection(self, index: int, block: int, slot: int) -> torch.Tensor:
        """W_block @ slot (with the block's fc_norm when the draft has one), cached per sample."""

        def make() -> torch.Tensor:
            s = self._slot(index, slot)
            if self.draft.config.norm_before_fc:
                # The whole input is normed first, so a block's projection of the raw slot only
                # serves the fc fingerprint's magnitudes; fc_output never sums these.
                return linear(s, self._fc_blocks[block])
            return fc_block_project(self.draft, s, block, self._fc_blocks[block])

        return self._proj.get_or_make((index, block, slot), make)

    @torch.inference_mode()
    def fc_output(self, index: int, wiring: Wiring) -> torch.Tensor:
        """h = fc(g) for the wired slots, [T, H]."""
        if self._linear_fc:
            parts = [self._projection(index, b, s) for b, s in enumerate(wiring.slots)]
            return fc_combine(self.draft, parts)
        slots = [self._slot(index, i) for i in wiring.slots]
        return fc_project(self.draft, fc_input(self.draft, slots))

    @torch.inference_mode()
    def slot_projection_norms(self, index: int) -> np.ndarray:
        """Mean L2 norm of W_b @ slot_s over masked positions, [N blocks, S slots] (fc fingerprint)."""
        s = self.samples[index]
        mask = s.loss_mask.bool().to(self.device)
        out = np.zeros((self.n_blocks, len(s.slots)))
        for b in range(self.n_blocks):
            for j in range(len(s.slots)):
                n = self._projection(index, b, j).float().norm(dim=-1)
                out[b, j] = float(n[mask].mean()) if bool(mask.any()) else float(n.mean())
        return out

    def slot_norms(self, index: int) -> np.ndarray:
        """Per-position L2 norm of every slot, [S, T] float32 (NaN/Inf propagate)."""
        s = self.samples[index]
        return torch.stack([t.float().norm(dim=-1) for t in s.slots]).numpy()

    @torch.inference_mode()
    def verifier_argmax(self, index: int) -> tuple[np.ndarray, np.ndarray] | None:
        """(full-vocab argmax, argmax within the draft vocab as target ids) at every position, from
        the verifier's last state; None without a target head or a verifier slot."""
        if self.target_head is None:
            return None
        cached = self._verifier.get(index, False)
        if cached is not False:
            return cached  # type: ignore[return-value]
        sample = self.samples[index]
        vs = sample.verifier_slot
        if vs is None:
            return self._verifier.put(index, None)
        th = self.target_head
        y = sample.slots[vs].to(self.device, th.lm_head.dtype)
        if not sample.slot_info[vs].post_norm:
            y = th.normed(y)  # the target's own final norm (Llama's, Gemma's (1 + w), ...)
        rows = self.chunking.logit_rows(th.lm_head.shape[0])
        full, in_vocab = [], []
        for chunk in y.split(rows):  # the full-vocab logits of a long sample would not fit at once
            # Soft-capping and scaling keep the order, but in low precision the cap can tie
            # logits the target also sees tied: applied as the target does.
            logits = th.finish(linear(chunk, th.lm_head))
            full.append(logits.argmax(-1))
            # The draft-vocab logits are a column subset: no second matmul, no copy of lm_head rows.
            to_target = self._vocab.to_target
            in_vocab.append(to_target[logits[:, to_target].argmax(-1)])
        result = (torch.cat(full).cpu().numpy(), torch.cat(in_vocab).cpu().numpy())
        return self._verifier.put(index, result)

    # --- predictions ---------------------------------------------------------------------------
    def predict(self, index: int, wiring: Wiring, *, keep: bool = True) -> SamplePredictions:
        """Every step's per-position predictions of sample `index` under `wiring`, cached unless
        `keep` is False (a one-pass run over the set reads each result once)."""
        key = (index, wiring.slots, self.ttt_steps)
        cached = self._preds.get(key)
        if cached is not None:
            return cached

        def free() -> None:
            # what other samples keep on the device
            self._dev_slots.pop_where(lambda k: k[0] != index)
            self._proj.pop_where(lambda k: k[0] != index)

        result = retry_oom(
            lambda chunking: self._predict(index, wiring, chunking),
            self.chunking,
            self.device,
            free=free,
        )
        self._trim_heap()
        return self._preds.put(key, result) if keep else result

    @torch.inference_mode()
    def _predict(self, index: int, wiring: Wiring, chunking: Chunking) -> SamplePredictions:
        sample = self.samples[index]
        t = sample.length
        ids = sample.input_ids.to(self.device)
        h = self.fc_output(index, wiring)[: t - 1]
        steps = min(self.ttt_steps, t - 2)
        verifier = self.verifier_argmax(index)
        mask = sample.loss_mask.to(self.device).bool()
        chunk_rows = chunking.logit_rows(self.draft.config.draft_vocab_size)
        step_preds: list[StepPredictions] = []
        for k, z in iter_steps(
            self.draft, h, ids[1:], steps, self.position_offset, chunking=chunking
        ):
            step_preds.append(self._step_predictions(k, z, ids, mask, verifier, chunk_rows))
        del h
        mask_np = sample.loss_mask.numpy().astype(bool)
        parallel = self.draft.config.parallel is not None
        metrics = step_metrics(step_preds, mask_np, verifier, parallel=parallel)
        accept = chain_accept_stats(step_preds, mask_np, self.ttt_steps)
        return SamplePredictions(index, sample.path, wiring, step_preds, metrics, accept)

    def _step_predictions(
        self,
        k: int,
        z: torch.Tensor,
        ids: torch.Tensor,
        mask: torch.Tensor,
        verifier: tuple[np.ndarray, np.ndarray] | None,
        chunk_rows: int,
    ) -> StepPredictions:
        """Reduce step k's output z (rows 0..T-2-k) to per-row numbers, chunk by chunk."""
        n = z.shape[0] - 1  # rows j = 0..T-3-k have a true label x_{j+2+k}; row n is the tail
        rows = torch.arange(n, device=ids.device)
        labels = self._vocab.labels(ids[rows + 2 + k])
        safe_true = labels.safe
        parts: list[RowScores] = []
        tail = None
        for a in range(0, n + 1, chunk_rows):
            e = min(n + 1, a + chunk_rows)
            logits = draft_logits(self.draft, z[a:e])
            if e == n + 1:  # the tail row: its argmax only (the trainers count it)
                tail = int(self._vocab.to_target[logits[-1].argmax()])
                logits = logits[:-1]
                e = n
            if e <= a:
                continue
            parts.append(score_logits(logits, safe_true[a:e], TOP_K, rank=True))
        del z
        # Every step has at least one labelled row (steps <= T-2), so parts is never empty.
        top_i = torch.cat([p.top_ids for p in parts])
        top_p = torch.cat([p.top_logp for p in parts]).exp()
        true_logp = torch.cat([p.true_logp for p in parts])
        rank = torch.cat([p.rank for p in parts if p.rank is not None])
        true, true_draft, in_vocab = labels.true, labels.draft, labels.in_vocab
        pred_draft = top_i[:, 0]
        pred_target = self._vocab.to_target[pred_draft]
        p_true = torch.where(in_vocab, true_logp.exp(), 0.0)
        loss = torch.where(in_vocab, -true_logp, float("nan"))

        def np_(x: torch.Tensor) -> np.ndarray:
            return x.cpu().numpy()

        v_full = v_in = None
        if verifier is not None:
            v_full = verifier[0][1 + k : 1 + k + n]
            v_in = verifier[1][1 + k : 1 + k + n]
        return StepPredictions(
            step=k,
            pos=np_(rows),
            input=np_(ids[rows + 1 + k]),
            true=np_(true),
            true_draft=np_(true_draft),
            pred_draft=np_(pred_draft),
            pred_target=np_(pred_target),
            p_pred=np_(top_p[:, 0]),
            p_true=np_(p_true),
            rank_true=np_(torch.where(in_vocab, rank, -1)),
            loss=np_(loss),
            topk_target=np_(self._vocab.to_target[top_i]),
            topk_p=np_(top_p),
            masked=np_(mask[rows + 1 + k]),
            in_vocab=np_(in_vocab),
            hit=np_(pred_target == true),
            verifier_target=v_full,
            verifier_in_vocab_target=v_in,
            tail_pred_target=tail,
        )

    # --- whole-set evaluation ----------------------------------------------------------------
    def each_sample(
        self,
        todo: Sequence[int],
        compute: Callable[[int], list[T]],
        skipped: list[SkippedSample],
        progress: Callable[[int, int], None] | None = None,
    ) -> Iterator[tuple[int, list[T]]]:
        """One pass over samples `todo`: (i, compute(i)) per sample, in order. A sample whose
        reading fails is recorded in `skipped` and the others still count; each sample's device
        tensors are released once computed (one pass reads nothing of it again); `progress`
        hears of each sample done."""
        for done, i in enumerate(todo, start=1):
            try:
                results: list[T] | None = compute(i)
            except InputError as e:
                skipped.append(SkippedSample.from_error(i, str(self.samples.files[i]), e))
                results = None
            self.release(i)
            if results is not None:
                yield i, results
            if progress is not None:
                progress(done, len(todo))

    def run(
        self,
        wirings: Sequence[Wiring],
        *,
        limit: int | None = None,
        positions: bool | PositionSink = False,
        progress: Callable[[int, int], None] | None = None,
        names: Sequence[str | None] | None = None,
        indices: Sequence[int] | None = None,
    ) -> Report:
        """Evaluate samples 0..limit-1, or just `indices` (one rank's shard under torchrun).
        names: each wiring's name (a preset, "configured"), None where it has none."""
        n = len(self.samples) if limit is None else min(limit, len(self.samples))
        todo = list(range(n)) if indices is None else [i for i in indices if i < n]
        per_wiring: list[list[tuple[int, str, list[StepMetrics]]]] = [[] for _ in wirings]
        accepts = [AcceptStats(self.ttt_steps) for _ in wirings]
        kept = PositionList(len(wirings)) if positions is True else None
        sink: PositionSink | None = kept if kept is not None else (positions or None)
        skipped: list[SkippedSample] = []

        def predict(i: int) -> list[SamplePredictions]:
            return [self.predict(i, w, keep=False) for w in wirings]

        for i, preds in self.each_sample(todo, predict, skipped, progress):
            for w_idx, pred in enumerate(preds):
                per_wiring[w_idx].append((i, pred.path, pred.metrics))
                if pred.accept is not None:
                    accepts[w_idx].add(pred.accept)
                if sink is not None:
                    for sp in pred.steps:
                        sink.add(w_idx, (sp.position_dict(r, i) for r in range(len(sp))))
        info = self.slot_info
        reports = [
            WiringReport(
                wiring=w,
                label=named_label(w, info, names[w_idx] if names else None),
                name=names[w_idx] if names else None,
                steps=sum_steps(s for _, _, s in per_wiring[w_idx]),
                per_sample=per_wiring[w_idx],
                positions=kept.rows[w_idx] if kept is not None else [],
                accept=accepts[w_idx],
            )
            for w_idx, w in enumerate(wirings)
        ]
        return Report(
            **Report.fields_of(self, todo, skipped),
            layout=self.draft.layout,
            sample_format=self.samples.format,
            ttt_steps=self.ttt_steps,
            wirings=reports,
        )
