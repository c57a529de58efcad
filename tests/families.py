"""Random-weight checkpoints of real draft configs, saved under the tensor names each trainer
writes (imported as `families`, like `hostile` and `support`).

A config keeps every architectural field as published (heads, kv heads, head_dim, MLA ranks,
rope, aux ids, norm flags, sliding windows, vocabulary relations); only sizes that cost time
shrink: the vocabulary, the MLP width, and the hidden size (to a multiple of the heads that keeps
an absent head_dim's hidden/heads a valid, even RoPE width) and MLA's compression ranks.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file

from inspector.synthetic import SyntheticSpec, write_samples

VOCAB = 320  # shrunk target vocabulary
DRAFT_VOCAB = 192  # shrunk draft vocabulary, where the published one is smaller than the target's
INTERMEDIATE = 48
HIDDEN = 64  # shrunk hidden size when head_dim is explicit (or the draft is MLA)
LORA_RANK = 32  # shrunk MLA q/kv compression ranks (heads and per-head dims stay as published)


@dataclass(frozen=True)
class FamilyCheckpoint:
    folder: Path  # the draft checkpoint
    samples: Path  # speculators v1 samples, 4 slots
    embed: Path | None  # the target embedding file, for trainers whose export drops it
    config: dict  # the shrunk config.json as written
    trainer: str  # "specforge" | "eagle" | "angelslim"
    slots: int  # fc blocks (aux layers)
    draft_vocab: int
    full_vocab: bool  # the draft predicts over the whole target vocabulary


def trainer_of(name: str) -> str:
    """Who writes a checkpoint of this config file: tensor names and what is saved differ."""
    if name.startswith("angelslim"):
        return "angelslim"  # midlayer.*, embed_tokens saved
    if name.startswith("safeailab"):
        return "eagle"  # midlayer.*, embed_tokens excluded (frozen)
    return "specforge"  # SpecForge and TorchSpec: midlayer.*, keys with "embed" dropped on export


def shrink(config: dict, *, keep_width: bool = False) -> dict:
    """The config at test sizes; every other field as published. keep_width: the hidden size
    and MLA ranks as published too (only the vocabulary and the MLP shrink), for timing."""
    cfg = dict(config)
    heads = cfg["num_attention_heads"]
    if not keep_width:
        explicit = "head_dim" in cfg or "kv_lora_rank" in cfg
        # Without head_dim, hidden/heads = 4: an even RoPE width, like the published 128.
        cfg["hidden_size"] = HIDDEN if explicit else 4 * heads
    cfg["intermediate_size"] = INTERMEDIATE
    vocab, draft = cfg["vocab_size"], cfg.get("draft_vocab_size")
    cfg["vocab_size"] = VOCAB
    for key in ("q_lora_rank", "kv_lora_rank"):
        if cfg.get(key) and not keep_width:
            cfg[key] = LORA_RANK
    if draft is not None:
        cfg["draft_vocab_size"] = VOCAB if draft == vocab else DRAFT_VOCAB
    return cfg


def n_slots(cfg: dict) -> int:
    eagle = cfg.get("eagle_config") or {}
    ids = cfg.get("eagle_aux_hidden_state_layer_ids") or eagle.get(
        "eagle_aux_hidden_state_layer_ids"
    )
    return len(ids) if ids else 3


def _attention(cfg: dict, in_dim: int, rnd, norm_w) -> dict[str, torch.Tensor]:
    h, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    if "kv_lora_rank" in cfg:  # MLA, names as SpecForge's / TorchSpec's MLA draft saves them
        nope, rope, vd = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
        q_lora, kv_lora = cfg.get("q_lora_rank"), cfg["kv_lora_rank"]
        out = {}
        if q_lora:
            out["q_a_proj.weight"] = rnd(q_lora, in_dim, scale=1 / in_dim**0.5)
            out["q_a_layernorm.weight"] = norm_w(q_lora)
            out["q_b_proj.weight"] = rnd(nh * (nope + rope), q_lora, scale=1.5 / q_lora**0.5)
        else:
            out["q_proj.weight"] = rnd(nh * (nope + rope), in_dim, scale=1.5 / in_dim**0.5)
        out["kv_a_proj_with_mqa.weight"] = rnd(kv_lora + rope, in_dim, scale=1 / in_dim**0.5)
        out["kv_a_layernorm.weight"] = norm_w(kv_lora)
        out["kv_b_proj.weight"] = rnd(nh * (nope + vd), kv_lora, scale=1.5 / kv_lora**0.5)
        out["o_proj.weight"] = rnd(h, nh * vd, scale=1 / (nh * vd) ** 0.5)
        return out
    hd = cfg.get("head_dim") or h // nh
    nkv = cfg.get("num_key_value_heads", nh)
    return {
        "q_proj.weight": rnd(nh * hd, in_dim, scale=1.5 / in_dim**0.5),
        "k_proj.weight": rnd(nkv * hd, in_dim, scale=1.5 / in_dim**0.5),
        "v_proj.weight": rnd(nkv * hd, in_dim, scale=1 / in_dim**0.5),
        "o_proj.weight": rnd(h, nh * hd, scale=1 / (nh * hd) ** 0.5),
    }


def input_proj_layout(name: str) -> bool:
    """Whether a config's MLA draft is SpecForge pull 186's `DeepseekV3ForCausalLMEagle3`: layer 0
    projects [norm(embed) | hidden_norm(fc out)] with `input_proj` (RMSNorm over 2H, then 2H -> H)
    and its MLA attention reads H. The later MLA drafts' q_a / kv_a read the 2H concat."""
    return name.startswith("specforge-pr186")


def weights(
    cfg: dict, trainer: str, seed: int = 0, *, input_proj: bool = False
) -> dict[str, torch.Tensor]:
    """Random weights of a shrunk config under the trainer's own tensor names. input_proj (MLA
    only): SpecForge pull 186's layer 0, `midlayer.input_proj.{input_norm,proj}` before MLA on H."""
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * scale

    def norm_w(n: int) -> torch.Tensor:
        return 0.5 + torch.rand(n, generator=g)

    h, inter, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    d = cfg.get("draft_vocab_size") or v
    n = n_slots(cfg)
    w: dict[str, torch.Tensor] = {
        # fc blocks scaled to their slot's norm (1, 20, 57: embedding-like, then deeper layers)
        "fc.weight": torch.cat(
            [rnd(h, h, scale=1 / (s * h**0.5)) for s in (1.0, 20.0, 57.0, 20.0)[:n]], dim=1
        ),
        "norm.weight": norm_w(h),
        "lm_head.weight": rnd(d, h, scale=4 / h**0.5),
    }
    for i in range(cfg.get("num_hidden_layers", 1)):
        # SpecForge's first layer is `midlayer`; extra layers follow SGLang's export names.
        p = "midlayer." if i == 0 else f"model.additional_layers.{i - 1}."
        in_dim = 2 * h if i == 0 and not input_proj else h
        for name, t in _attention(cfg, in_dim, rnd, norm_w).items():
            w[p + "self_attn." + name] = t
        if i == 0 and input_proj:
            w[p + "input_proj.input_norm.weight"] = norm_w(2 * h)
            w[p + "input_proj.proj.weight"] = rnd(h, 2 * h, scale=1 / (2 * h) ** 0.5)
        w[p + "mlp.gate_proj.weight"] = rnd(inter, h, scale=1 / h**0.5)
        w[p + "mlp.up_proj.weight"] = rnd(inter, h, scale=1 / h**0.5)
        w[p + "mlp.down_proj.weight"] = rnd(h, inter, scale=1 / inter**0.5)
        w[p + "hidden_norm.weight"] = norm_w(h)
        w[p + "input_layernorm.weight"] = norm_w(h)
        w[p + "post_attention_layernorm.weight"] = norm_w(h)
    if cfg.get("use_aux_norm"):
        for part in ("low", "mid", "high"):
            w[f"aux_norm_{part}.weight"] = norm_w(h)
    if cfg.get("fc_norm"):
        for b in range(n):
            w[f"fc_norm.{b}.weight"] = norm_w(h)
    # SpecForge and AngelSlim register d2t/t2d buffers whatever the vocabulary (identity when
    # full); EAGLE's trainer deletes them for a full vocabulary.
    if d < v:
        chosen = torch.randperm(v, generator=g)[:d].sort().values
        w["d2t"] = chosen - torch.arange(d)
        t2d = torch.zeros(v, dtype=torch.bool)
        t2d[chosen] = True
        w["t2d"] = t2d
    elif trainer != "eagle":
        w["d2t"] = torch.zeros(d, dtype=torch.long)
        w["t2d"] = torch.ones(v, dtype=torch.bool)
    w["embed_tokens.weight"] = rnd(v, h, scale=1 / h**0.5)
    return w


def build(
    config_file: Path,
    out: Path,
    seed: int = 0,
    seq_len: int = 24,
    *,
    keep_width: bool = False,
    input_proj: bool | None = None,
) -> FamilyCheckpoint:
    """Write the shrunk checkpoint of `config_file` (its key order and values kept), samples,
    and, where the trainer's export drops the embedding, a target embedding file. input_proj:
    SpecForge pull 186's MLA layer-0 layout (None: as the config's trainer wrote it,
    `input_proj_layout`)."""
    published = json.loads(config_file.read_text())
    cfg = shrink(published, keep_width=keep_width)
    trainer = trainer_of(config_file.stem)
    if input_proj is None:
        input_proj = input_proj_layout(config_file.stem)
    w = weights(cfg, trainer, seed, input_proj=input_proj and "kv_lora_rank" in cfg)
    embed = None
    if trainer != "angelslim":
        embed = out / "target_embed.safetensors"
        out.mkdir(parents=True, exist_ok=True)
        save_file({"model.embed_tokens.weight": w.pop("embed_tokens.weight")}, str(embed))
    folder = out / "draft"
    folder.mkdir(parents=True, exist_ok=True)
    dtype = getattr(torch, published.get("torch_dtype") or published.get("dtype") or "float32")
    stored = {k: (t.to(dtype) if t.is_floating_point() else t) for k, t in w.items()}
    save_file({k: t.contiguous() for k, t in stored.items()}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    samples = out / "samples"
    samples.mkdir(exist_ok=True)
    n = n_slots(cfg)
    spec = SyntheticSpec(n_samples=2, seq_len=seq_len, seed=seed, dtype=dtype)
    write_samples(samples, cfg["hidden_size"], cfg["vocab_size"], spec, n_slots=n + 1)
    d = cfg.get("draft_vocab_size") or cfg["vocab_size"]
    return FamilyCheckpoint(
        folder, samples, embed, cfg, trainer, n, d, full_vocab=d == cfg["vocab_size"]
    )


def case_id(path: Path) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", path.stem.lower())
