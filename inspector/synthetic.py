"""Random drafts and samples of any size, written in the speculators layout.

For benchmarks and tests that need a shape the demo does not have (a mid-size draft, long samples,
a head_dim that differs from hidden/heads). The weights are random but scaled like a trained draft
(fc blocks scaled to their slot's norm), so softmaxes are neither flat nor one-hot.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file

SIZES = {
    # H, heads, kv heads, head_dim, intermediate, V, D
    "tiny": (64, 4, 2, 16, 128, 256, 96),
    "mid": (1024, 8, 2, 128, 2816, 32000, 8000),
    "4k": (4096, 32, 8, 128, 14336, 32000, 16000),  # an 8B target's draft width
    "large": (7168, 64, 8, 128, 18432, 163840, 32000),
}

SLOT_NORMS = (1.0, 20.0, 57.0, 157.0)  # embed, low, mid, last: like real captures
SLOT_LAYERS = (0, 2, 4, 6)


@dataclass
class SyntheticSpec:
    size: str = "tiny"
    n_samples: int = 4
    seq_len: int = 64
    seed: int = 0
    dtype: torch.dtype = torch.float32
    head_dim: int | None = None  # override, e.g. to differ from hidden/heads
    write_head_dim: bool = True


def _weights(spec: SyntheticSpec) -> tuple[dict[str, torch.Tensor], dict]:
    h, nh, nkv, hd, inter, v, d = SIZES[spec.size]
    hd = spec.head_dim or hd
    g = torch.Generator().manual_seed(spec.seed)

    def rnd(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return (torch.randn(*shape, generator=g) * scale).to(spec.dtype)

    def norm_w(n: int) -> torch.Tensor:
        return (0.5 + torch.rand(n, generator=g)).to(spec.dtype)

    fc_blocks = [rnd(h, h, scale=1.0 / (s * h**0.5)) for s in SLOT_NORMS[:3]]
    w = {
        "fc.weight": torch.cat(fc_blocks, dim=1),
        "layers.0.self_attn.q_proj.weight": rnd(nh * hd, 2 * h, scale=1.5 / (2 * h) ** 0.5),
        "layers.0.self_attn.k_proj.weight": rnd(nkv * hd, 2 * h, scale=1.5 / (2 * h) ** 0.5),
        "layers.0.self_attn.v_proj.weight": rnd(nkv * hd, 2 * h, scale=1 / (2 * h) ** 0.5),
        "layers.0.self_attn.o_proj.weight": rnd(h, nh * hd, scale=1 / (nh * hd) ** 0.5),
        "layers.0.mlp.gate_proj.weight": rnd(inter, h, scale=1 / h**0.5),
        "layers.0.mlp.up_proj.weight": rnd(inter, h, scale=1 / h**0.5),
        "layers.0.mlp.down_proj.weight": rnd(h, inter, scale=1 / inter**0.5),
        "layers.0.input_layernorm.weight": norm_w(h),
        "layers.0.hidden_norm.weight": norm_w(h),
        "layers.0.post_attention_layernorm.weight": norm_w(h),
        "norm.weight": norm_w(h),
        "lm_head.weight": rnd(d, h, scale=4 / h**0.5),
        "embed_tokens.weight": rnd(v, h, scale=1 / h**0.5),
    }
    if d < v:
        chosen = torch.randperm(v, generator=g)[:d].sort().values
        w["d2t"] = chosen - torch.arange(d)
        t2d = torch.zeros(v, dtype=torch.bool)
        t2d[chosen] = True
        w["t2d"] = t2d
    layer_cfg = {
        "model_type": "llama",
        "hidden_size": h,
        "num_attention_heads": nh,
        "num_key_value_heads": nkv,
        "intermediate_size": inter,
        "num_hidden_layers": 1,
        "rms_norm_eps": 1e-5,
        "vocab_size": v,
        "max_position_embeddings": 8192,
        "rope_theta": 10000.0,
    }
    if spec.write_head_dim:
        layer_cfg["head_dim"] = hd
    config = {
        "architectures": ["Eagle3DraftModel"],
        "speculators_model_type": "eagle3",
        "draft_vocab_size": d,
        "norm_before_residual": False,
        "target_hidden_size": None,
        "eagle_aux_hidden_state_layer_ids": list(SLOT_LAYERS[:3]),
        "transformer_layer_config": layer_cfg,
    }
    return w, config


def write_synthetic(out: Path, spec: SyntheticSpec | None = None) -> tuple[Path, Path]:
    """Write `out/draft` (config.json + model.safetensors) and `out/samples` (v1 .pt files)."""
    spec = spec or SyntheticSpec()
    out = Path(out)
    draft_dir, sample_dir = out / "draft", out / "samples"
    draft_dir.mkdir(parents=True, exist_ok=True)
    sample_dir.mkdir(parents=True, exist_ok=True)
    weights, config = _weights(spec)
    save_file({k: v.contiguous() for k, v in weights.items()}, str(draft_dir / "model.safetensors"))
    (draft_dir / "config.json").write_text(json.dumps(config, indent=2))
    layer = config["transformer_layer_config"]
    write_samples(sample_dir, layer["hidden_size"], layer["vocab_size"], spec)
    return draft_dir, sample_dir


def write_samples(
    sample_dir: Path, hidden: int, vocab: int, spec: SyntheticSpec, n_slots: int = 4
) -> None:
    """speculators v1 samples of `n_slots` slots of width `hidden` (the last one the verifier's
    state), token ids below `vocab`, and their data_config.json."""
    g = torch.Generator().manual_seed(spec.seed + 1)
    norms = (*SLOT_NORMS[:1], *SLOT_NORMS[1:-1] * n_slots)[: n_slots - 1] + SLOT_NORMS[-1:]
    for i in range(spec.n_samples):
        t = spec.seq_len
        ids = torch.randint(0, vocab, (t,), generator=g)
        slots = [
            (torch.randn(t, hidden, generator=g) * (n / hidden**0.5)).to(spec.dtype) for n in norms
        ]
        mask = torch.zeros(t, dtype=torch.long)
        mask[max(1, round(0.3 * t)) :] = 1
        torch.save(
            {"input_ids": ids, "hidden_states": slots, "loss_mask": mask},
            sample_dir / f"data_{i}.pt",
        )
    layers = [2 * i for i in range(n_slots)]
    (sample_dir / "data_config.json").write_text(
        json.dumps({"hidden_states": {"layer_ids": layers, "index_convention": "hf"}})
    )
