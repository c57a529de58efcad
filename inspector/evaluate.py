"""Predictions per position, metrics per wiring, and the caches that make re-wiring cheap.

fc is linear, so fc(cat(s_a, s_b, s_c)) = W0 s_a + W1 s_b + W2 s_c: each (block, slot) projection is
computed once per sample and any wiring is a sum of cached projections. Only the layer after fc
runs again when the wiring changes.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from inspector.draft import Draft
from inspector.errors import InputError
from inspector.formats.samples import SampleSet
from inspector.formats.target import TargetHead
from inspector.metrics import Counts, StepMetrics, acceptance_length, sum_steps
from inspector.model import fc_input, fc_project, forward_steps, rms_norm
from inspector.sample import Sample, SlotInfo, with_layer_ids
from inspector.wiring import Wiring, parse_wiring

TOP_K = 10


def resolve_device(name: str | None) -> torch.device:
    """auto -> the first CUDA device when there is one, else CPU."""
    if name in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise InputError(None, "--device", f"{name} requested but CUDA is not available")
    return dev


@dataclass
class StepPredictions:
    """Per-position results of one TTT step on one sample (numpy arrays, one entry per row j).

    Row j of step k feeds token x_{j+1+k} and predicts x_{j+2+k}; token ids are target ids unless
    the name says draft. OOV true tokens have true_draft == -1, p_true == 0, rank_true == -1 and
    loss == nan.
    """

    step: int
    pos: np.ndarray
    input: np.ndarray
    true: np.ndarray
    true_draft: np.ndarray
    pred_draft: np.ndarray
    pred_target: np.ndarray
    p_pred: np.ndarray
    p_true: np.ndarray
    rank_true: np.ndarray
    loss: np.ndarray
    topk_target: np.ndarray  # [P, k]
    topk_p: np.ndarray  # [P, k]
    masked: np.ndarray
    in_vocab: np.ndarray
    hit: np.ndarray
    verifier_target: np.ndarray | None = None  # verifier full-vocab argmax (target id)
    verifier_in_vocab_target: np.ndarray | None = None  # verifier argmax within the draft vocab

    def __len__(self) -> int:
        return int(self.pos.size)

    def metrics(self, prev_chain: np.ndarray | None) -> tuple[StepMetrics, np.ndarray]:
        """Counts for this step; prev_chain[j] says steps < k all hit at row j (None at step 0)."""
        m = self.masked
        chain_in = m if prev_chain is None else (m & prev_chain[: len(self)])
        chain = chain_in & self.hit
        sm = StepMetrics(
            self.step,
            all_tok=Counts(int((self.hit & m).sum()), int(m.sum())),
            in_vocab=Counts(
                int((self.hit & m & self.in_vocab).sum()), int((m & self.in_vocab).sum())
            ),
            coverage=Counts(int((m & self.in_vocab).sum()), int(m.sum())),
            cond=Counts(int(chain.sum()), int(chain_in.sum())),
        )
        if self.verifier_target is not None and self.verifier_in_vocab_target is not None:
            a = self.pred_target == self.verifier_in_vocab_target
            b = self.pred_target == self.verifier_target  # only possible when in vocab
            sm.verifier_a = Counts(int((a & m).sum()), int(m.sum()))
            sm.verifier_b = Counts(int((b & m).sum()), int(m.sum()))
        return sm, chain

    def position_dict(self, r: int, sample: int) -> dict:
        """The JSON contract for one position (see `eagle-inspect eval --positions`)."""
        in_vocab = bool(self.in_vocab[r])
        return {
            "sample": sample,
            "step": self.step,
            "pos": int(self.pos[r]),
            "input": int(self.input[r]),
            "true": int(self.true[r]),
            "true_draft": int(self.true_draft[r]) if in_vocab else None,
            "pred_draft": int(self.pred_draft[r]),
            "pred_target": int(self.pred_target[r]),
            "p_pred": float(self.p_pred[r]),
            "p_true": float(self.p_true[r]),
            "rank_true": int(self.rank_true[r]) if in_vocab else None,
            "loss": float(self.loss[r]) if in_vocab else None,
            "masked": bool(self.masked[r]),
            "in_vocab": in_vocab,
            "hit": bool(self.hit[r]),
            "topk": [
                [int(t), float(p)] for t, p in zip(self.topk_target[r], self.topk_p[r], strict=True)
            ],
        }


@dataclass
class SamplePredictions:
    index: int
    path: str
    wiring: Wiring
    steps: list[StepPredictions]
    metrics: list[StepMetrics]

    @property
    def acceptance_length(self) -> float:
        return acceptance_length(self.metrics)


@dataclass
class WiringReport:
    wiring: Wiring
    label: str
    steps: list[StepMetrics]
    per_sample: list[tuple[int, str, list[StepMetrics]]] = field(default_factory=list)
    positions: list[dict] = field(default_factory=list)

    @property
    def acceptance_length(self) -> float:
        return acceptance_length(self.steps)

    def to_dict(self) -> dict:
        d = {
            "wiring": list(self.wiring.slots),
            "label": self.label,
            "steps": [s.to_dict() for s in self.steps],
            "acceptance_length": self.acceptance_length,
            "per_sample": [
                {"index": i, "path": p, "steps": [s.to_dict() for s in steps]}
                for i, p, steps in self.per_sample
            ],
        }
        if self.positions:
            d["positions"] = self.positions
        return d


@dataclass
class SampleError:
    index: int
    path: str
    message: str


@dataclass
class Report:
    checkpoint: str
    layout: str
    samples: int
    sample_format: str
    device: str
    dtype: str
    ttt_steps: int
    slots: list[SlotInfo]
    wirings: list[WiringReport]
    errors: list[SampleError] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "checkpoint": self.checkpoint,
            "layout": self.layout,
            "samples": self.samples,
            "sample_format": self.sample_format,
            "device": self.device,
            "dtype": self.dtype,
            "ttt_steps": self.ttt_steps,
            "slots": [s.to_dict(i) for i, s in enumerate(self.slots)],
            "wirings": [w.to_dict() for w in self.wirings],
            "errors": [{"index": e.index, "path": e.path, "error": e.message} for e in self.errors],
        }


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
        sample_cache: int = 3,
        prediction_cache: int = 256,
        slot_layers: Sequence[int] | None = None,
    ) -> None:
        if ttt_steps < 1:
            raise InputError(None, "--ttt-steps", "must be at least 1")
        self.draft = draft
        self.samples = samples
        self.ttt_steps = ttt_steps
        self.device = draft.device
        self.target_head = target_head.to(self.device) if target_head is not None else None
        self.position_offset = position_offset
        self._t2d_map = draft.vocab.target_to_draft.to(self.device)
        self._d2t_abs = draft.vocab.draft_to_target.to(self.device)
        self._linear_fc = not draft.config.norm_before_fc
        # Contiguous transposed fc blocks: a strided column slice would be copied on every matmul.
        self._fc_blocks_t = [draft.fc_block(b).T.contiguous() for b in range(self.n_blocks)]
        self._sample_cache_size = sample_cache
        self._proj: OrderedDict[int, dict[tuple[int, int], torch.Tensor]] = OrderedDict()
        self._dev_slots: OrderedDict[int, list[torch.Tensor]] = OrderedDict()
        self._verifier: dict[int, tuple[np.ndarray, np.ndarray] | None] = {}
        self._pred_cache: OrderedDict[tuple[int, tuple[int, ...], int], SamplePredictions] = (
            OrderedDict()
        )
        self._pred_cache_size = prediction_cache
        # HF index of every slot, overriding data_config.json (--slot-layers).
        self.slot_layers = tuple(int(k) for k in slot_layers) if slot_layers is not None else None

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

    def wiring(self, spec: str | Sequence[int]) -> Wiring:
        return parse_wiring(spec, self.slot_info, self.n_blocks)

    # --- per-sample device tensors and caches --------------------------------------------------
    def _touch(self, cache: OrderedDict, key: int, make: Callable) -> object:
        if key in cache:
            cache.move_to_end(key)
            return cache[key]
        value = make()
        cache[key] = value
        while len(cache) > self._sample_cache_size:
            cache.popitem(last=False)
        return value

    def sample(self, index: int) -> Sample:
        return self.samples[index]

    def keep_warm(self, index: int) -> None:
        """Mark sample `index` most recently used in the per-sample caches (loaded sample, device
        slots, fc projections), so background work on other samples (the app's prefetch and
        set-wide fill) does not evict the sample on screen; a no-op for a sample not cached."""
        if index not in self._dev_slots and index not in self._proj:
            return
        self.samples[index]
        for cache in (self._proj, self._dev_slots):
            if index in cache:
                cache.move_to_end(index)

    def _slots(self, index: int) -> list[torch.Tensor]:
        def make() -> list[torch.Tensor]:
            s = self.samples[index]
            ht = self.draft.config.target_hidden_size
            for i, t in enumerate(s.slots):
                if t.shape[-1] != ht:
                    raise InputError(
                        s.path,
                        f"hidden_states[{i}]",
                        f"width {t.shape[-1]} but the draft's fc expects target_hidden_size {ht}",
                    )
            return [t.to(self.device, self.draft.dtype, non_blocking=True) for t in s.slots]

        return self._touch(self._dev_slots, index, make)

    def _projection(self, index: int, block: int, slot: int) -> torch.Tensor:
        """W_block @ slot (with the block's fc_norm when the draft has one), cached per sample."""
        cache = self._touch(self._proj, index, dict)
        key = (block, slot)
        if key not in cache:
            s = self._slots(index)[slot]
            cfg = self.draft.config
            if cfg.fc_norm:
                s = rms_norm(s, self.draft.weights[f"fc_norm.{block}.weight"], cfg.rms_norm_eps)
            cache[key] = s @ self._fc_blocks_t[block]
        return cache[key]

    @torch.inference_mode()
    def fc_output(self, index: int, wiring: Wiring) -> torch.Tensor:
        """h = fc(g) for the wired slots, [T, H]."""
        if self._linear_fc:
            h = self._projection(index, 0, wiring.slots[0])
            for b, s in enumerate(wiring.slots[1:], start=1):
                h = h + self._projection(index, b, s)
            if "fc.bias" in self.draft.weights:
                h = h + self.draft.weights["fc.bias"]
            return h
        slots = self._slots(index)
        return fc_project(self.draft, fc_input(self.draft, [slots[i] for i in wiring.slots]))

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
    def _verifier_argmax(self, index: int) -> tuple[np.ndarray, np.ndarray] | None:
        """(full-vocab argmax, argmax within the draft vocab as target ids) at every position."""
        if self.target_head is None:
            return None
        if index in self._verifier:
            return self._verifier[index]
        sample = self.samples[index]
        vs = sample.verifier_slot
        if vs is None:
            self._verifier[index] = None
            return None
        th = self.target_head
        y = sample.slots[vs].to(self.device, th.lm_head.dtype)
        if not sample.slot_info[vs].post_norm and th.norm_weight is not None:
            y = rms_norm(y, th.norm_weight, th.rms_norm_eps)
        full, in_vocab = [], []
        for chunk in y.split(512):  # the full-vocab logits of a long sample would not fit at once
            logits = chunk @ th.lm_head.T
            full.append(logits.argmax(-1))
            # The draft-vocab logits are a column subset: no second matmul, no copy of lm_head rows.
            in_vocab.append(self._d2t_abs[logits[:, self._d2t_abs].argmax(-1)])
        result = (torch.cat(full).cpu().numpy(), torch.cat(in_vocab).cpu().numpy())
        self._verifier[index] = result
        return result

    # --- predictions ---------------------------------------------------------------------------
    @torch.inference_mode()
    def predict(self, index: int, wiring: Wiring) -> SamplePredictions:
        key = (index, wiring.slots, self.ttt_steps)
        if key in self._pred_cache:
            self._pred_cache.move_to_end(key)
            return self._pred_cache[key]
        sample = self.samples[index]
        t = sample.length
        ids = sample.input_ids.to(self.device)
        h = self.fc_output(index, wiring)[: t - 1]
        steps = min(self.ttt_steps, t - 2)
        logits = forward_steps(
            self.draft, h, ids[1:], steps=steps, position_offset=self.position_offset
        )
        verifier = self._verifier_argmax(index)
        mask = sample.loss_mask.to(self.device).bool()
        step_preds: list[StepPredictions] = []
        metrics: list[StepMetrics] = []
        chain: np.ndarray | None = None
        for k, lg in enumerate(logits):
            n_rows = t - 2 - k  # rows j = 0..T-3-k have a true label x_{j+2+k}
            sp = self._step_predictions(k, lg[:n_rows], ids, mask, verifier)
            sm, chain = sp.metrics(chain)
            step_preds.append(sp)
            metrics.append(sm)
        result = SamplePredictions(index, sample.path, wiring, step_preds, metrics)
        self._pred_cache[key] = result
        while len(self._pred_cache) > self._pred_cache_size:
            self._pred_cache.popitem(last=False)
        return result

    def _step_predictions(
        self,
        k: int,
        logits: torch.Tensor,
        ids: torch.Tensor,
        mask: torch.Tensor,
        verifier: tuple[np.ndarray, np.ndarray] | None,
    ) -> StepPredictions:
        n = logits.shape[0]
        rows = torch.arange(n, device=ids.device)
        true = ids[rows + 2 + k]
        true_draft = self._t2d_map[true]
        in_vocab = true_draft >= 0
        # Few passes over the [P, D] logits: logsumexp, top-k (its first entry is the argmax),
        # and one comparison for the rank; probabilities only where they are shown.
        logits = logits.float()
        lse = torch.logsumexp(logits, dim=-1, keepdim=True)
        kk = min(TOP_K, logits.shape[-1])
        top_logit, top_i = logits.topk(kk, dim=-1)
        top_p = (top_logit - lse).exp()
        pred_draft = top_i[:, 0]
        pred_target = self._d2t_abs[pred_draft]
        safe_true = true_draft.clamp(min=0)
        true_logit = logits.gather(1, safe_true[:, None])
        rank = (logits > true_logit).sum(-1) + 1
        true_logp = (true_logit - lse)[:, 0]
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
            topk_target=np_(self._d2t_abs[top_i]),
            topk_p=np_(top_p),
            masked=np_(mask[rows + 1 + k]),
            in_vocab=np_(in_vocab),
            hit=np_(pred_target == true),
            verifier_target=v_full,
            verifier_in_vocab_target=v_in,
        )

    # --- whole-set evaluation ----------------------------------------------------------------
    def run(
        self,
        wirings: Sequence[Wiring],
        *,
        limit: int | None = None,
        positions: bool = False,
        progress: Callable[[int, int], None] | None = None,
        labels: Sequence[str] | None = None,
        indices: Sequence[int] | None = None,
    ) -> Report:
        """Evaluate samples 0..limit-1, or just `indices` (one rank's shard under torchrun)."""
        n = len(self.samples) if limit is None else min(limit, len(self.samples))
        todo = list(range(n)) if indices is None else [i for i in indices if i < n]
        per_wiring: list[list[tuple[int, str, list[StepMetrics]]]] = [[] for _ in wirings]
        pos_rows: list[list[dict]] = [[] for _ in wirings]
        errors: list[SampleError] = []
        for done, i in enumerate(todo, start=1):
            try:
                preds = [self.predict(i, w) for w in wirings]
            except InputError as e:
                # A bad sample is reported and skipped; the others still count.
                errors.append(SampleError(i, str(self.samples.files[i]), str(e)))
                preds = []
            for w_idx, pred in enumerate(preds):
                per_wiring[w_idx].append((i, pred.path, pred.metrics))
                if positions:
                    for sp in pred.steps:
                        pos_rows[w_idx].extend(sp.position_dict(r, i) for r in range(len(sp)))
            if progress is not None:
                progress(done, len(todo))
        info = self.slot_info
        reports = [
            WiringReport(
                wiring=w,
                label=(labels[w_idx] if labels else w.label(info)),
                steps=sum_steps(s for _, _, s in per_wiring[w_idx]),
                per_sample=per_wiring[w_idx],
                positions=pos_rows[w_idx],
            )
            for w_idx, w in enumerate(wirings)
        ]
        return Report(
            checkpoint=self.draft.path,
            layout=self.draft.layout,
            samples=len(todo) - len(errors),
            sample_format=self.samples.format,
            device=str(self.device),
            dtype=str(self.draft.dtype).replace("torch.", ""),
            ttt_steps=self.ttt_steps,
            slots=info,
            wirings=reports,
            errors=errors,
        )
