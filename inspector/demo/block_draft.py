"""A small DFlash draft trained here on the demo target's states (z-lab's layout), on any ids:
what the doctor's block checks are tested against (a random draft fits no wiring).

    target = load_target(demo.target)
    recapture(target, demo.train_samples, out / "samples")         # every layer, HF 0..L
    folder = train_block_draft(out / "draft", out / "samples", demo.target, ids=(0, 3, 5))

Training is the reference's objective at its simplest: every anchor n of a generation is one
block [x_n, mask, ...] over the target's features of rows 0..n-1, and block row k is trained
to predict x_{n+k} (cross-entropy, every row weighted alike). The forward is the inspector's own
(`model.block.anchored_block_hidden`, under autograd); the target's embedding and head are
frozen, as the reference keeps them. Deterministic for one seed and thread count.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from inspector.demo.data import GeneratedSequence, capture_slots, save_samples, slot_labels
from inspector.demo.tiny_target import Target, TargetConfig
from inspector.draft import Draft, VocabMap
from inspector.formats.block_config import parse_block_config
from inspector.formats.target_tensors import read_embedding, read_target_lm_head
from inspector.model.block import anchored_block_hidden, head_logits


def load_target(folder: Path) -> Target:
    """The demo's tiny Llama target from its HF folder (config.json + model.safetensors)."""
    raw = json.loads((folder / "config.json").read_text())
    fields = TargetConfig.__dataclass_fields__
    cfg = TargetConfig(**{k: v for k, v in raw.items() if k in fields})
    model = Target(cfg)
    state = {
        k.removeprefix("model."): v for k, v in load_file(folder / "model.safetensors").items()
    }
    model.load_state_dict(state)
    return model.eval()


@torch.no_grad()
def recapture(target: Target, samples: Path, out: Path, limit: int | None = None) -> Path:
    """The demo samples' tokens again, with every layer's state (HF 0..L) as slots."""
    files = sorted(samples.glob("data_*.pt"), key=lambda p: int(p.stem.split("_")[1]))
    records = []
    for f in files[:limit]:
        rec = torch.load(f, weights_only=True)
        ids, mask = rec["input_ids"], rec["loss_mask"]
        start = int(mask.nonzero()[0]) if bool(mask.any()) else ids.numel()
        seq = GeneratedSequence(ids, start)
        layers = list(range(target.config.num_hidden_layers + 1))
        records.append(
            {
                "input_ids": ids,
                "hidden_states": capture_slots(target, seq, layers),
                "loss_mask": mask,
            }
        )
    n = target.config.num_hidden_layers
    layers = list(range(n + 1))
    meta = {"generator": "inspector.demo.block_draft (every layer)", "target": str(samples)}
    save_samples(out, records, meta, layers, slot_labels(layers, n))
    return out


@dataclass(frozen=True)
class BlockPlan:
    """The draft's sizes and its training."""

    layers: int = 3
    intermediate: int = 128
    block_size: int = 4
    steps: int = 300
    lr: float = 3e-3
    samples_per_step: int = 2
    anchors_per_sample: int = 32  # a random subset of each picked sample's anchors
    seed: int = 0
    # the block's embedding rows times this (the reference reads `input_embedding_scale`);
    # written to the config where it is not 1
    input_embedding_scale: float = 1.0


def block_config(target_cfg: dict, ids: tuple[int, ...], plan: BlockPlan) -> dict:
    """z-lab's config.json for a draft on `ids` (decoder-layer numbering: HF id + 1); the mask
    token is the vocabulary's last id."""
    h = target_cfg["hidden_size"]
    return {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "hidden_size": h,
        "num_attention_heads": target_cfg["num_attention_heads"],
        "num_key_value_heads": target_cfg["num_key_value_heads"],
        "head_dim": target_cfg["head_dim"],
        "intermediate_size": plan.intermediate,
        "num_hidden_layers": plan.layers,
        "vocab_size": target_cfg["vocab_size"],
        "rms_norm_eps": 1e-6,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
        "num_target_layers": target_cfg["num_hidden_layers"],
        "dflash_config": {
            "block_size": plan.block_size,
            "mask_token_id": target_cfg["vocab_size"] - 1,
            "target_layer_ids": list(ids),
            **(
                {"input_embedding_scale": plan.input_embedding_scale}
                if plan.input_embedding_scale != 1.0
                else {}
            ),
        },
        "tie_word_embeddings": False,
    }


def _init(cfg, g: torch.Generator) -> dict[str, torch.Tensor]:
    def normal(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * 0.02

    h, hd, nh, nkv = cfg.hidden_size, cfg.head_dim, cfg.num_heads, cfg.num_kv_heads
    w = {
        "fc.weight": normal(h, cfg.num_fc_blocks * cfg.target_hidden_size),
        "hidden_norm.weight": torch.ones(h),
        "norm.weight": torch.ones(h),
    }
    for i in range(cfg.num_layers):
        p = f"layers.{i}."
        w |= {
            p + "self_attn.q_proj.weight": normal(nh * hd, h),
            p + "self_attn.k_proj.weight": normal(nkv * hd, h),
            p + "self_attn.v_proj.weight": normal(nkv * hd, h),
            p + "self_attn.o_proj.weight": normal(h, nh * hd),
            p + "self_attn.q_norm.weight": torch.ones(hd),
            p + "self_attn.k_norm.weight": torch.ones(hd),
            p + "mlp.gate_proj.weight": normal(cfg.intermediate_size, h),
            p + "mlp.up_proj.weight": normal(cfg.intermediate_size, h),
            p + "mlp.down_proj.weight": normal(h, cfg.intermediate_size),
            p + "input_layernorm.weight": torch.ones(h),
            p + "post_attention_layernorm.weight": torch.ones(h),
        }
    return w


def _load_samples(
    folder: Path, hf: tuple[int, ...]
) -> list[tuple[torch.Tensor, torch.Tensor, list[int]]]:
    """(ids, context [T, N*Ht] at the HF indices `hf`, anchors) of every sample."""
    out = []
    for f in sorted(folder.glob("data_*.pt"), key=lambda p: int(p.stem.split("_")[1])):
        rec = torch.load(f, weights_only=True)
        ids, mask = rec["input_ids"], rec["loss_mask"].bool()
        context = torch.cat([rec["hidden_states"][k].float() for k in hf], dim=-1)
        # an anchor n: x_n committed, x_{n+1} generated (the rounds of its generation)
        anchors = [n for n in range(1, ids.numel() - 1) if bool(mask[n + 1])]
        out.append((ids, context, anchors))
    return out


def train_block_draft(
    out: Path,
    samples: Path,
    target: Path,
    ids: tuple[int, ...],
    plan: BlockPlan = BlockPlan(),
) -> Path:
    """Train a DFlash draft on the target's states at `ids` (HF ids + 1) of `samples` (which
    must hold them as data_config.json's HF indices 0..L), and write it to `out`."""
    target_cfg = json.loads((target / "config.json").read_text())
    config = block_config(target_cfg, ids, plan)
    cfg, _ = parse_block_config(out / "config.json", config, "dflash")
    g = torch.Generator().manual_seed(plan.seed)
    trained = {k: v.requires_grad_() for k, v in _init(cfg, g).items()}
    shape = (cfg.vocab_size, cfg.hidden_size)
    frozen = {
        "embed_tokens.weight": read_embedding(target, shape),
        "lm_head.weight": read_target_lm_head(target),
    }
    draft = Draft(cfg, {**trained, **frozen}, VocabMap.identity(cfg.vocab_size), name=out.name)
    block = cfg.block
    assert block is not None
    data = _load_samples(samples, block.hf_layer_ids)
    opt = torch.optim.AdamW(trained.values(), lr=plan.lr, weight_decay=0.0)
    b = block.block_size
    offsets = torch.arange(b)
    for step in range(plan.steps):
        lr = plan.lr * min(1.0, (step + 1) / 20) * (0.1 + 0.9 * (1 - step / plan.steps))
        for group in opt.param_groups:
            group["lr"] = lr
        picks = torch.randint(len(data), (plan.samples_per_step,), generator=g)
        loss = torch.zeros(())
        for i in picks.tolist():
            tokens, context, anchors = data[i]
            keep = torch.randperm(len(anchors), generator=g)[: plan.anchors_per_sample]
            at = torch.tensor(anchors)[keep.sort().values]
            block_ids = torch.full((len(at), b), block.mask_token_id)
            block_ids[:, 0] = tokens[at]
            where = at[:, None] + offsets[None, 1:]
            valid = where < tokens.numel()
            true = tokens[where.clamp(max=tokens.numel() - 1)]
            logits = head_logits(draft, anchored_block_hidden(draft, context, at, block_ids)[:, 1:])
            ce = torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), true.reshape(-1), reduction="none"
            )
            loss = loss + (ce * valid.reshape(-1)).sum() / valid.sum()
        opt.zero_grad()
        (loss / len(picks)).backward()
        opt.step()
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    state = {k: v.detach().contiguous() for k, v in trained.items()}
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


TRAINED_IDS = (0, 3, 5)  # HF 1, 4, 6: not the reference's default spread [1, 2, 3] on 6 layers
DEMO_STEPS = 400


def build_block_demo(out: Path, demo_root: Path, log=print) -> dict[str, Path]:
    """The demo's block-draft case: a DFlash draft trained on `TRAINED_IDS` (`out/draft`), the
    same weights under a config that lost its `target_layer_ids` (`out/lost-ids`: what SGLang
    serves with its guessed ids), and the demo's samples with every layer (`out/samples`).
    One CPU thread, so the bits are the same on every machine (about 30 s)."""
    import shutil

    from inspector.demo_paths import DemoPaths

    demo = DemoPaths(demo_root)
    if out.exists() and any(out.iterdir()):
        from inspector.errors import InputError, setting_field

        raise InputError(out, setting_field("out"), "not empty: the demo writes a new folder")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        samples = recapture(load_target(demo.target), demo.train_samples, out / "samples")
        draft = train_block_draft(
            out / "draft", samples, demo.target, TRAINED_IDS, BlockPlan(steps=DEMO_STEPS)
        )
    finally:
        torch.set_num_threads(before)
    lost = out / "lost-ids"
    shutil.copytree(draft, lost)
    cfg = json.loads((lost / "config.json").read_text())
    del cfg["dflash_config"]["target_layer_ids"]
    (lost / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    log(
        f"wrote {draft} (trained on target_layer_ids {list(TRAINED_IDS)}), {lost} (the same "
        f"weights, its config without target_layer_ids) and {samples} (every layer)"
    )
    return {"draft": draft, "lost_ids": lost, "samples": samples}
