"""How tests/golden_block/ was made (documentation; the tests never run it).

The reference DFlash implementation (`dflash` 0.1.0 on the package index, z-lab, MIT: its
`dflash.model.DFlashDraftModel` and `DFlash2DraftModel`) builds tiny random block drafts, saves
them with its own `save_pretrained` (z-lab's layout: config.json + model.safetensors), loads them
back with its own `from_pretrained`, and computes the logits of a block the way its own
`dflash_generate` does: the noise embedding is the target's embedding of [anchor, mask, ...]
times `input_embedding_scale`, the draft's forward returns the final-normed block rows, the anchor's
row is dropped (`[:, 1 - block:]`) and `compute_logits` applies the target's head,
`output_multiplier` and the soft cap. DFlash2's greedy proposal (`propose`, temperature 0: the
candidate selector's path) is written too.

The weights the reference initialises are far too small to give logits with clear top-2 gaps
(normal, std 0.02), so every parameter is redrawn here (seeded) before saving. No reference code is
copied: this script imports it.

Run it in a scratch environment, never in the project's:

    python -m venv /tmp/dflash-venv
    /tmp/dflash-venv/bin/pip install torch==2.13.0            # the CPU wheel
    /tmp/dflash-venv/bin/pip install transformers==5.15.0 safetensors dflash==0.1.0
    /tmp/dflash-venv/bin/python tests/golden_block/make_golden.py tests/golden_block

Cases (expected.safetensors keys `<case>.logits` [1, B-1, V] float32, DFlash2 also
`<case>.proposal` [1, B-1] int64; inputs.safetensors holds each case's `context` and `block_ids`):

- `dflash.single`: one call, 9 context rows, block 4 at positions 9..12; every layer bidirectional
  (no `is_causal`, full-attention layer_types: the reference's default).
- `dflash.cached`: `dflash_generate`'s cache: a first round over 6 context rows, the cache cropped
  back to them, then a second round given only the 4 new context rows (positions 6..9) and the block
  at 10..13. Our forward is given all 10 context rows at once: the context keys of a round depend on
  their own rows and positions only, so both must agree.
- `dflash.swa`: the same weights under config edits (meta.json `swa_overrides`): layer 0 a sliding
  layer of window 5 (the reference then makes it causal), layer 1 full (bidirectional).
- `dflash2.single`: a DFlash2 draft (grouped dynamic causal convs around attention and MLP, the
  candidate selector), `is_causal` false with sliding layers of window 6, input_embedding_scale 8,
  output_multiplier 0.5, final_logit_softcapping 8. Its safetensors file names the two selector
  codebooks without `.weight`, as the released DFlash2 checkpoints do (the reference's
  `from_pretrained` maps them back with its `key_mapping`).

The target is a stand-in: a random embedding and lm_head in `target/` (a Qwen3 config.json of 8
layers and model.safetensors with `model.embed_tokens.weight` and `lm_head.weight`).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import math
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import Qwen3Config

# The reference's `dflash.model`, imported by `main` only: this script runs in a venv that holds
# the reference (see above); the test environment reads the files it wrote and never imports it.
ref = None


def _reference():
    try:
        return importlib.import_module("dflash.model")
    except ImportError:
        sys.exit(
            "make_golden.py writes what the reference computes: run it where "
            "`pip install dflash==0.1.0` was done (see this file's docstring)"
        )


H, HEADS, KV_HEADS, HEAD_DIM, INTER, VOCAB = 64, 4, 2, 16, 96, 256
TARGET_LAYERS = 8
LAYER_IDS = [1, 4, 6]  # the reference's numbering: hidden_states[id + 1]
BLOCK = 4
MASK = 250
SWA_OVERRIDES = {
    "layer_types": ["sliding_attention", "full_attention"],
    "sliding_window": 5,
    "use_sliding_window": True,
}


def _config(**extra) -> Qwen3Config:
    cfg = Qwen3Config(
        hidden_size=H,
        intermediate_size=INTER,
        num_hidden_layers=2,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM,
        vocab_size=VOCAB,
        rms_norm_eps=1e-6,
        max_position_embeddings=256,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        tie_word_embeddings=False,
        **extra,
    )
    cfg.num_target_layers = TARGET_LAYERS
    return cfg


def _redraw(model: nn.Module, seed: int) -> None:
    """Every parameter redrawn: linears ~ N(0, 1/fan_in), norms 1 + 0.2 N, the rest N(0, 0.3)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            z = torch.randn(p.shape, generator=gen)
            if "norm" in name:
                p.copy_(1.0 + 0.2 * z)
            elif p.dim() == 2 and "codebook" not in name:
                p.copy_(z / math.sqrt(p.shape[1]))
            else:
                p.copy_(0.3 * z)


class Target(nn.Module):
    """What dflash_generate reads of a target: its input embeddings and lm_head."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.embed = nn.Embedding(VOCAB, H)
        self.lm_head = nn.Linear(H, VOCAB, bias=False)
        with torch.no_grad():
            self.embed.weight.copy_(torch.randn(VOCAB, H, generator=gen))
            self.lm_head.weight.copy_(torch.randn(VOCAB, H, generator=gen) / math.sqrt(H))

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed


def _block_logits(draft, target, context, block_ids, start, cache=None):
    """One round as dflash_generate runs it: (logits [1, B-1, V], final-normed rows [1, B-1, H])."""
    b = block_ids.shape[1]
    scale = float(ref._draft_value(draft.config, "input_embedding_scale", 1.0))
    noise = ref._raw_input_embeddings(target, block_ids, scale)
    positions = torch.arange(start + b)[None]
    hidden = draft(
        target_hidden=context,
        noise_embedding=noise,
        position_ids=positions[:, start - context.shape[1] : start + b],
        past_key_values=cache,
        use_cache=cache is not None,
    )[:, 1 - b :, :]
    return draft.compute_logits(hidden, ref._output_head(target)), hidden


def _block(gen: torch.Generator) -> torch.Tensor:
    anchor = torch.randint(0, MASK, (1, 1), generator=gen)
    return torch.cat([anchor, torch.full((1, BLOCK - 1), MASK)], dim=1)


def _save_target(target: Target, out: Path) -> None:
    folder = out / "target"
    folder.mkdir(parents=True, exist_ok=True)
    cfg = {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "hidden_size": H,
        "num_hidden_layers": TARGET_LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "intermediate_size": INTER,
        "vocab_size": VOCAB,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
    }
    (folder / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    save_file(
        {
            "model.embed_tokens.weight": target.embed.weight.detach().contiguous(),
            "lm_head.weight": target.lm_head.weight.detach().contiguous(),
        },
        str(folder / "model.safetensors"),
    )


def _save(model: nn.Module, folder: Path) -> None:
    model.save_pretrained(str(folder), safe_serialization=True)
    for extra in folder.iterdir():
        if extra.name not in ("config.json", "model.safetensors"):
            extra.unlink()  # generation_config.json and the like: not part of the layout


def _top2_gap(logits: torch.Tensor) -> float:
    top2 = logits.topk(2, dim=-1).values
    return float((top2[..., 0] - top2[..., 1]).min())


def main(out: Path) -> None:
    global ref
    ref = _reference()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    if out.exists():
        for sub in ("dflash", "dflash2", "target"):
            shutil.rmtree(out / sub, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    target = Target(seed=2)
    _save_target(target, out)
    n_feat = len(LAYER_IDS) * H
    inputs: dict[str, torch.Tensor] = {}
    expected: dict[str, torch.Tensor] = {}
    gaps: dict[str, float] = {}

    # DFlash
    dcfg = {"target_layer_ids": LAYER_IDS, "block_size": BLOCK, "mask_token_id": MASK}
    cfg = _config(dflash_config=dcfg, architectures=["DFlashDraftModel"])
    built = ref.DFlashDraftModel(cfg).float()
    _redraw(built, seed=3)
    _save(built, out / "dflash" / "checkpoint")
    draft = ref.DFlashDraftModel.from_pretrained(str(out / "dflash" / "checkpoint")).float().eval()
    with torch.no_grad():
        ctx = torch.randn(1, 9, n_feat, generator=gen)
        block = _block(gen)
        logits, _ = _block_logits(draft, target, ctx, block, start=9)
        inputs |= {"dflash.single.context": ctx, "dflash.single.block_ids": block}
        expected["dflash.single.logits"] = logits

        ctx1 = torch.randn(1, 6, n_feat, generator=gen)
        ctx2 = torch.randn(1, 4, n_feat, generator=gen)
        cache = ref._make_cache(draft.config)
        _block_logits(draft, target, ctx1, _block(gen), start=6, cache=cache)
        ref._crop_to(cache, 6)
        block2 = _block(gen)
        logits2, _ = _block_logits(draft, target, ctx2, block2, start=10, cache=cache)
        inputs |= {
            "dflash.cached.context": torch.cat([ctx1, ctx2], dim=1),
            "dflash.cached.block_ids": block2,
        }
        expected["dflash.cached.logits"] = logits2

        swa = ref.DFlashDraftModel(_config(dflash_config=dcfg, **SWA_OVERRIDES)).float().eval()
        swa.load_state_dict(draft.state_dict())
        assert swa.layers[0].self_attn.is_causal and swa.layers[0].self_attn.sliding_window == 5
        assert not swa.layers[1].self_attn.is_causal
        logits3, _ = _block_logits(swa, target, ctx, block, start=9)
        inputs |= {"dflash.swa.context": ctx, "dflash.swa.block_ids": block}
        expected["dflash.swa.logits"] = logits3

    # DFlash2
    d2cfg = dcfg | {
        "conv_kernel_size": 3,
        "conv_group_size": 16,
        "selector_rank": 8,
        "selector_top_k": 8,
        "input_embedding_scale": 8.0,
        "output_multiplier": 0.5,
        "final_logit_softcapping": 8.0,
    }
    cfg2 = _config(
        dflash_config=d2cfg,
        architectures=["DFlash2DraftModel"],
        is_causal=False,
        layer_types=["sliding_attention", "sliding_attention"],
        sliding_window=6,
        use_sliding_window=True,
    )
    built2 = ref.DFlash2DraftModel(cfg2).float()
    _redraw(built2, seed=4)
    folder2 = out / "dflash2" / "checkpoint"
    _save(built2, folder2)
    # the released DFlash2 files name the two codebooks without ".weight"
    tensors = load_file(str(folder2 / "model.safetensors"))
    for name in ("predecessor_codebook", "successor_codebook"):
        tensors[f"candidate_selector.{name}"] = tensors.pop(f"candidate_selector.{name}.weight")
    save_file(tensors, str(folder2 / "model.safetensors"), metadata={"format": "pt"})
    draft2 = ref.DFlash2DraftModel.from_pretrained(str(folder2)).float().eval()
    assert all(not layer.self_attn.is_causal for layer in draft2.layers)
    with torch.no_grad():
        ctx = torch.randn(1, 11, n_feat, generator=gen)
        block = _block(gen)
        logits, hidden = _block_logits(draft2, target, ctx, block, start=11)
        proposal, _, _ = draft2.propose(hidden, block[:, 0], ref._output_head(target), 0.0)
        inputs |= {"dflash2.single.context": ctx, "dflash2.single.block_ids": block}
        expected["dflash2.single.logits"] = logits
        expected["dflash2.single.proposal"] = proposal

    for key, value in expected.items():
        if key.endswith(".logits"):
            gaps[key] = _top2_gap(value)
    save_file(
        {k: v.clone().contiguous() for k, v in inputs.items()}, str(out / "inputs.safetensors")
    )
    save_file({k: v.contiguous() for k, v in expected.items()}, str(out / "expected.safetensors"))
    meta = {
        "reference": f"dflash {importlib.metadata.version('dflash')}",
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "layer_ids": LAYER_IDS,
        "block_size": BLOCK,
        "mask_token_id": MASK,
        "swa_overrides": SWA_OVERRIDES,
        "smallest_top2_gap": gaps,
        "logits_rms": {
            k: float(v.double().pow(2).mean().sqrt()) for k, v in expected.items() if "logits" in k
        },
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
