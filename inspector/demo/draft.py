"""The demo's EAGLE-3 draft: draft vocab, training with the project's own forward, speculators save.

The draft is trained with :func:`inspector.model.forward_steps` itself, so the demo can only show
good training-wiring accuracy if the inspector's forward pass matches the one used in training.
Training follows speculators v1: fc takes all slots but the last ([embed, low, middle]); the last
slot (the verifier's last state) is never an fc input.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch import Tensor

from inspector.demo.tiny_target import lr_at, progress_fraction
from inspector.formats.writer import DraftFiles, write_draft
from inspector.model import (
    Draft,
    DraftConfig,
    RopeConfig,
    VocabMap,
    fc_input,
    fc_project,
    forward_steps,
)

TRAIN_WIRING = (0, 1, 2)  # speculators v1 standardize_data_v1: cat(hidden_states[:-1])
SERVE_WIRING = (1, 2, 3)  # an engine capturing only the aux layers: [low, middle, last]
TTT_STEPS = 3


def draft_vocab(records: Sequence[dict], vocab_size: int, draft_vocab_size: int) -> VocabMap:
    """The ``draft_vocab_size`` most frequent loss-masked tokens, sorted ascending by target id.

    Ties break towards the lower id so the choice is deterministic. d2t holds offsets
    (target = draft + d2t[draft]); t2d marks the chosen target ids.
    """
    counts = torch.zeros(vocab_size, dtype=torch.long)
    for r in records:
        counts += torch.bincount(r["input_ids"][r["loss_mask"].bool()], minlength=vocab_size)
    # Sort by count descending, then id ascending (a stable sort on -count keeps id order).
    order = torch.sort(-counts, stable=True).indices[:draft_vocab_size]
    ids = torch.sort(order).values
    t2d = torch.zeros(vocab_size, dtype=torch.bool)
    t2d[ids] = True
    d2t = ids - torch.arange(draft_vocab_size)
    return VocabMap(d2t=d2t.to(torch.long), t2d=t2d)


def draft_config(vocab_size: int, draft_vocab_size: int, hidden: int = 128) -> DraftConfig:
    return DraftConfig(
        hidden_size=hidden,
        target_hidden_size=hidden,
        num_heads=4,
        num_kv_heads=2,
        head_dim=32,
        intermediate_size=384,
        rms_norm_eps=1e-5,
        rope=RopeConfig(theta=10000.0),
        vocab_size=vocab_size,
        draft_vocab_size=draft_vocab_size,
        num_layers=1,
        num_fc_blocks=3,
        aux_layer_ids=(0, 2, 4),
        aux_layer_convention="hf",
        source_format="speculators",
    )


def init_draft(
    config: DraftConfig,
    vocab: VocabMap,
    target_embed: Tensor,
    target_lm_head: Tensor,
    seed: int,
    *,
    qk_norm: bool = False,
) -> Draft:
    """Random init like HF (normal 0.02, norms at one); ``lm_head`` starts as the target's rows of
    the draft vocab (speculators ``load_verifier_weights``); ``embed_tokens`` is the target's (frozen).

    Every shape the model runs: N fc blocks, the optional fc norms (`fc_norm.{i}`, `input_norm`),
    layers after the first (reading H, not the 2H concat), and Qwen3-style q/k norms per head."""
    g = torch.Generator().manual_seed(seed)
    H, inter, hd = config.hidden_size, config.intermediate_size, config.head_dim
    nh, nkv, ht = config.num_heads, config.num_kv_heads, config.target_hidden_size

    def rnd(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=g) * 0.02

    w = {"fc.weight": rnd(H, config.num_fc_blocks * ht)}
    for i in range(config.num_layers):
        p = f"layers.{i}."
        fan_in = 2 * H if i == 0 else H  # layer 0 reads [norm(embed) | hidden_norm(h)]
        w |= {
            p + "self_attn.q_proj.weight": rnd(nh * hd, fan_in),
            p + "self_attn.k_proj.weight": rnd(nkv * hd, fan_in),
            p + "self_attn.v_proj.weight": rnd(nkv * hd, fan_in),
            p + "self_attn.o_proj.weight": rnd(H, nh * hd),
            p + "mlp.gate_proj.weight": rnd(inter, H),
            p + "mlp.up_proj.weight": rnd(inter, H),
            p + "mlp.down_proj.weight": rnd(H, inter),
            p + "input_layernorm.weight": torch.ones(H),
            p + "post_attention_layernorm.weight": torch.ones(H),
        }
        if i == 0:
            w[p + "hidden_norm.weight"] = torch.ones(H)
        if qk_norm:
            w[p + "self_attn.q_norm.weight"] = torch.ones(hd)
            w[p + "self_attn.k_norm.weight"] = torch.ones(hd)
    if config.fc_norm:
        w |= {f"fc_norm.{b}.weight": torch.ones(ht) for b in range(config.num_fc_blocks)}
    if config.norm_before_fc:
        w["input_norm.weight"] = torch.ones(config.num_fc_blocks * ht)
    w |= {
        "norm.weight": torch.ones(H),
        "lm_head.weight": target_lm_head[vocab.t2d].clone().float(),
        "embed_tokens.weight": target_embed.clone().float(),
    }
    return Draft(config=config, weights=w, vocab=vocab, name="demo-draft", layout="speculators")


def _batch(records: Sequence[dict], wiring: Sequence[int]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Right-pad a list of samples: fc input g [B, T, N*H], ids [B, T], loss mask [B, T], valid [B, T].

    Right padding is safe: attention is causal, so padded rows never reach real rows.
    """
    T = max(r["input_ids"].numel() for r in records)
    B = len(records)
    H = records[0]["hidden_states"][0].shape[-1]
    g = torch.zeros(B, T, len(wiring) * H)
    ids = torch.zeros(B, T, dtype=torch.long)
    mask = torch.zeros(B, T, dtype=torch.long)
    valid = torch.zeros(B, T, dtype=torch.bool)
    for b, r in enumerate(records):
        t = r["input_ids"].numel()
        g[b, :t] = torch.cat([r["hidden_states"][s].float() for s in wiring], -1)
        ids[b, :t] = r["input_ids"]
        mask[b, :t] = r["loss_mask"]
        valid[b, :t] = True
    return g, ids, mask, valid


def fc_wired_batch(draft: Draft, gin: Tensor) -> Tensor:
    """fc of a batch's concatenated slots [B, T, N*Ht], through the draft's optional norms."""
    slots = list(gin.split(draft.config.target_hidden_size, dim=-1))
    return fc_project(draft, fc_input(draft, slots))


def step_labels(ids: Tensor, mask: Tensor, valid: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """Labels and weights for TTT step k, for rows j = 0..T-3-k (the rows that have a true label).

    Row j at step k was fed x_{j+1+k} and predicts x_{j+2+k}; it counts when loss_mask[j+1+k] is 1
    (the speculators ``shift_batch`` alignment) and the label is a real (not padded) token.
    """
    T = ids.shape[-1]
    labels = ids[..., 2 + k :]
    use = mask[..., 1 + k : T - 1].bool() & valid[..., 2 + k :]
    return labels, use


def train_draft(
    draft: Draft,
    records: Sequence[dict],
    *,
    epochs: int,
    batch: int,
    seed: int,
    lr: float = 3e-3,
    step_weights: Sequence[float] = (1.0, 0.8, 0.64),
    wiring: Sequence[int] = TRAIN_WIRING,
    time_budget_s: float | None = None,
    progress: Callable[[str], None] = lambda s: None,
    on_step: Callable[[int, int], None] | None = None,
) -> dict:
    """Teacher-forced TTT training (one step per entry of `step_weights`) on `wiring` (the slots
    fed to fc blocks 0..N-1), cross-entropy against the true next token mapped into the draft
    vocab (out-of-vocab labels are skipped, as EAGLE/SpecForge do). Any draft shape the model
    runs trains: the optional fc norms, norm_output, q/k norms, N slots, several layers.

    Trains ``draft.weights`` in place (all but the frozen target embedding); returns stats.
    ``on_step(step, epoch)`` runs after each optimizer step (a training run's checkpoints).
    """
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    frozen = {"embed_tokens.weight"}
    params = []
    for name, t in draft.weights.items():
        if name not in frozen and t.is_floating_point():
            t.requires_grad_(True)
            params.append(t)
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    t2d_index = draft.vocab.target_to_draft
    steps_per_epoch = math.ceil(len(records) / batch)
    total = epochs * steps_per_epoch
    t0 = time.perf_counter()
    step = 0
    losses: list[float] = []
    compressed = False
    frac = 0.0
    epoch = 0
    while frac < 1.0:
        perm = torch.randperm(len(records), generator=g).tolist()
        for i in range(0, len(perm), batch):
            frac = progress_fraction(step, total, time.perf_counter() - t0, time_budget_s)
            if frac >= 1.0:
                break
            compressed = compressed or frac > step / total
            chunk = [records[j] for j in perm[i : i + batch]]
            gin, ids, mask, valid = _batch(chunk, wiring)
            # Row j: slots at j, token x_{j+1}; there is no row for the last position.
            h = fc_wired_batch(draft, gin[:, :-1])
            logits = forward_steps(draft, h, ids[:, 1:], steps=len(step_weights))
            loss = torch.zeros(())
            for k, lg in enumerate(logits):
                labels, use = step_labels(ids, mask, valid, k)
                dl = t2d_index[labels]
                use = use & (dl >= 0)
                lg = lg[:, : labels.shape[1]]
                ce = F.cross_entropy(lg[use], dl[use]) if use.any() else lg.sum() * 0
                loss = loss + step_weights[k] * ce
            for group in opt.param_groups:
                group["lr"] = lr_at(frac, lr, floor=0.05)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            losses.append(loss.item())
            step += 1
            if on_step is not None:
                on_step(step, epoch)
        else:
            epoch += 1
            recent = losses[-steps_per_epoch:]
            progress(
                f"draft epoch {epoch}/{epochs} loss {sum(recent) / len(recent):.3f} "
                f"({time.perf_counter() - t0:.0f}s)"
            )
            frac = progress_fraction(step, total, time.perf_counter() - t0, time_budget_s)
    if compressed:
        progress(f"draft: time budget led the schedule; stopped after {step} of {total} steps")
    for t in params:
        t.requires_grad_(False)
    recent = losses[-steps_per_epoch:]
    return {
        "epochs": epochs,
        "steps": step,
        "final_loss": sum(recent) / max(1, len(recent)),
        "seconds": time.perf_counter() - t0,
        "schedule_compressed_by_time": compressed,
    }


@torch.no_grad()
def evaluate(
    draft: Draft, records: Sequence[dict], wiring: Sequence[int], steps: int = TTT_STEPS
) -> dict:
    """Teacher-forced accuracy of ``draft`` on ``records`` with the given slot wiring.

    - ``step0``: all-tok accuracy of step 0: predicted target id == x_{j+2} over rows with
      loss_mask[j+1] = 1 (out-of-vocab true tokens count as misses: serving rejects them).
    - ``per_step`` / ``conditional``: over rows j that have labels for every step, the share whose
      steps 0..k are all right, and that share divided by the one for steps 0..k-1 (c_k).
    - ``acceptance_length``: 1 + sum_k prod_{m<=k} c_m, the expected tokens per verify step.
    """
    d2t_abs = draft.vocab.draft_to_target
    hits0 = total0 = 0
    chain_hits = [0] * steps
    chain_rows = 0
    for r in records:
        gin, ids, mask, valid = _batch([r], wiring)
        h = fc_wired_batch(draft, gin[:, :-1])
        logits = forward_steps(draft, h, ids[:, 1:], steps=steps)
        T = ids.shape[1]
        rows = T - 1 - steps  # rows j = 0..T-2-steps have a label at every step
        alive = mask[0, 1 : 1 + rows].bool()
        chain_rows += int(alive.sum())
        for k, lg in enumerate(logits):
            labels, use = step_labels(ids, mask, valid, k)
            pred = d2t_abs[lg[:, : labels.shape[1]].argmax(-1)]
            ok = pred == labels
            if k == 0:
                hits0 += int((ok & use).sum())
                total0 += int(use.sum())
            alive = alive & ok[0, :rows]
            chain_hits[k] += int(alive.sum())
    full = [c / max(1, chain_rows) for c in chain_hits]
    cond = [chain_hits[0] / max(1, chain_rows)] + [
        chain_hits[k] / max(1, chain_hits[k - 1]) for k in range(1, steps)
    ]
    acc_len = 1.0
    prod = 1.0
    for c in cond:
        prod *= c
        acc_len += prod
    return {
        "wiring": list(wiring),
        "step0": hits0 / max(1, total0),
        "step0_hits": hits0,
        "step0_total": total0,
        "per_step": full,
        "conditional": cond,
        "acceptance_length": acc_len,
    }


def speculators_config(config: DraftConfig, verifier_name: str, layer_type: str = "llama") -> dict:
    """config.json in the layout speculators 0.9 ``save_pretrained`` writes (see golden/): the
    aux ids (the demo's [0, 2, 4] when the config names none), the norm flags, and the decoder
    layer's type ("qwen3": q/k RMSNorm per head, as speculators' `--draft-arch qwen3`)."""
    ids = list(config.aux_layer_ids) if config.aux_layer_ids is not None else [0, 2, 4]
    layer = {"model_type": layer_type}
    if layer_type == "qwen3":  # what transformers' Qwen3Config adds (golden/speculators-qwen3)
        layer |= {
            "layer_types": ["full_attention"] * config.num_layers,
            "max_window_layers": 28,
            "sliding_window": None,
            "use_sliding_window": False,
        }
    return {
        "architectures": ["Eagle3DraftModel"],
        "draft_vocab_size": config.draft_vocab_size,
        "dtype": "float32",
        "eagle_aux_hidden_state_layer_ids": ids,
        "embed_requires_grad": False,
        "fc_norm": config.fc_norm,
        "norm_before_fc": config.norm_before_fc,
        "norm_before_residual": config.norm_before_residual,
        "norm_output": config.norm_output,
        "speculators_config": {
            "algorithm": "eagle3",
            "default_proposal_method": "greedy",
            "proposal_methods": [
                {
                    "accept_tolerance": 0.0,
                    "proposal_type": "greedy",
                    "speculative_tokens": TTT_STEPS,
                    "verifier_accept_k": 1,
                }
            ],
            "verifier": {"architectures": ["LlamaForCausalLM"], "name_or_path": verifier_name},
        },
        "speculators_model_type": "eagle3",
        "speculators_version": "0.9.0",
        "target_hidden_size": None,
        "tie_word_embeddings": False,
        "transformer_layer_config": {
            "attention_bias": False,
            "attention_dropout": 0.0,
            "bos_token_id": 0,
            "eos_token_id": 0,
            "head_dim": config.head_dim,
            "hidden_act": "silu",
            "hidden_size": config.hidden_size,
            "initializer_range": 0.02,
            "intermediate_size": config.intermediate_size,
            "max_position_embeddings": 512,
            "mlp_bias": False,
            "num_attention_heads": config.num_heads,
            "num_hidden_layers": config.num_layers,
            "num_key_value_heads": config.num_kv_heads,
            "pad_token_id": None,
            "pretraining_tp": 1,
            "rms_norm_eps": config.rms_norm_eps,
            "rope_parameters": {"rope_theta": config.rope.theta, "rope_type": "default"},
            "tie_word_embeddings": False,
            "use_cache": True,
            "vocab_size": config.vocab_size,
        }
        | layer,
    }


def draft_files(draft: Draft, verifier_name: str = "../target") -> DraftFiles:
    """A draft as a speculators checkpoint: float32 tensors under speculators names, d2t/t2d
    included, and the config speculators writes (keys sorted; a Qwen3 layer when the first layer
    has q/k norms)."""
    tensors = {k: v.detach().float() for k, v in draft.weights.items()}
    tensors["d2t"] = draft.vocab.d2t.to(torch.int64)
    tensors["t2d"] = draft.vocab.t2d.to(torch.bool)
    qk_norm = "layers.0.self_attn.q_norm.weight" in tensors
    cfg = speculators_config(draft.config, verifier_name, "qwen3" if qk_norm else "llama")
    return DraftFiles(config=cfg, tensors=tensors, sort_keys=True)


def save_draft(draft: Draft, folder: Path, verifier_name: str = "../target") -> None:
    """Write the demo draft into the new (or empty) folder `folder`."""
    write_draft(draft_files(draft, verifier_name), folder, field="--out")


def load_demo_draft(folder: Path) -> Draft:
    """Read a draft written by :func:`save_draft` with safetensors alone (no format detection):
    the tests use it to check the committed files independently of ``inspector.formats``."""
    cfg = json.loads((folder / "config.json").read_text())
    tensors = load_file(str(folder / "model.safetensors"))
    vocab = VocabMap(d2t=tensors.pop("d2t"), t2d=tensors.pop("t2d"))
    config = draft_config(
        cfg["transformer_layer_config"]["vocab_size"],
        cfg["draft_vocab_size"],
        cfg["transformer_layer_config"]["hidden_size"],
    )
    return Draft(
        config=config, weights=tensors, vocab=vocab, name=folder.name, layout="speculators"
    )


def slot_mean_norms(records: Sequence[dict]) -> list[float]:
    """Mean per-token L2 norm of each slot over all tokens of ``records``."""
    n = len(records[0]["hidden_states"])
    sums = [0.0] * n
    count = 0
    for r in records:
        for i, h in enumerate(r["hidden_states"]):
            sums[i] += float(h.float().norm(dim=-1).sum())
        count += r["input_ids"].numel()
    return [s / count for s in sums]
