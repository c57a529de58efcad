"""Drafts of the 2026 shapes, trained here on the bundled demo's samples with the demo's own
trainer (imported as `trained_shapes`): held-out material for the doctor, whose wiring search and
norm checks need a draft that was trained on one wiring (random weights fit none).

Each shape is trained on one wiring of the demo's slots [embed, L2, L4, L6] (HF 0, 2, 4, 6 of its
6-layer target) and, for the single-slot head, on the target's final post-norm state (the demo's
L6 through the target's own final norm), added to a copy of the samples as slot 3 of
[embed, L2, L4, post-norm, L6]. Training is short: the doctor's tests train TTT step 0 for 12
epochs (18 s for all six), enough for the trained wiring to stand clearly above the others; the
engine stages (`python tests/trained_shapes.py OUT`) train two TTT steps for 20 epochs, so that the
engines' later drafting steps have something to accept. Deterministic: the same seed and thread
count give the same weights.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from safetensors.torch import load_file

from inspector.demo.draft import draft_config, draft_files, draft_vocab, init_draft, train_draft
from inspector.formats.writer import write_draft
from inspector.model import rms_norm

POST_NORM_SLOT = 3  # in the samples written for the single-slot head


@dataclass(frozen=True)
class Shape:
    name: str
    ids: tuple[int, ...]  # config.json's eagle_aux_hidden_state_layer_ids (HF indices)
    wiring: tuple[int, ...]  # the slots it is trained on, fc block order
    layers: int = 1
    qk_norm: bool = False
    fc_norm: bool = False
    norm_before_fc: bool = False
    norm_output: bool = False
    norm_before_residual: bool = False
    post_norm_samples: bool = False  # trained on samples with the post-norm slot added


SHAPES = {
    s.name: s
    for s in (
        # EAGLE-3.1 as the paper and vLLM mean it, and as speculators first shipped it
        Shape("fcnorm", (0, 2, 4), (0, 1, 2), fc_norm=True, norm_output=True),
        Shape("normfc", (0, 2, 4), (0, 1, 2), norm_before_fc=True, norm_output=True),
        Shape("qwen3", (0, 2, 4), (0, 1, 2), qk_norm=True),
        # SpecDrift: two layers fed two slots
        Shape("deep", (2, 4), (1, 2), layers=2),
        Shape("wide", (0, 2, 4, 6), (0, 1, 2, 3)),
        # the first layer's residual is hidden_norm(fc output): a flag SGLang 0.5.23 reads nowhere
        Shape("nbr", (0, 2, 4), (0, 1, 2), norm_before_residual=True),
        # gpt-oss short-context heads: the final post-norm state alone; its config names the
        # last layer (the boundary after the last block), which engines capture before the norm
        Shape("single", (6,), (POST_NORM_SLOT,), post_norm_samples=True),
    )
}


def _records(folder: Path) -> list[dict]:
    files = sorted(folder.glob("data_*.pt"), key=lambda p: int(p.stem.split("_")[1]))
    return [torch.load(f, weights_only=True) for f in files]


def post_norm_samples(demo_samples: Path, target: Path, out: Path) -> Path:
    """A copy of the demo's samples with the target's final post-norm state as slot 3."""
    norm = load_file(str(target / "model.safetensors"))["model.norm.weight"].float()
    eps = json.loads((target / "config.json").read_text())["rms_norm_eps"]
    out.mkdir(parents=True)
    for f in sorted(demo_samples.glob("data_*.pt")):
        s = torch.load(f, weights_only=True)
        last = s["hidden_states"][-1]
        post = rms_norm(last.float(), norm, eps).to(last.dtype)
        s["hidden_states"] = [*s["hidden_states"][:-1], post, last]
        torch.save(s, out / f.name)
    dc = json.loads((demo_samples / "data_config.json").read_text())
    dc["hidden_states"]["layer_ids"] = [0, 2, 4, "post-norm", 6]
    dc["hidden_states"]["labels"].insert(3, "final norm output (post-norm)")
    dc["target"] = str(target.resolve())
    (out / "data_config.json").write_text(json.dumps(dc, indent=2))
    return out


def samples_for(shape: Shape, demo, root: Path, split: str = "train") -> Path:
    """The sample folder a shape trains on (and the doctor reads)."""
    src = demo.train_samples if split == "train" else demo.held_samples
    if not shape.post_norm_samples:
        return src
    out = root / f"post-norm-{split}"
    return out if out.exists() else post_norm_samples(src, demo.root / "target", out)


def train_shape(
    shape: Shape, demo, root: Path, *, epochs: int = 20, ttt: int = 2, seed: int = 0
) -> Path:
    """Train `shape` on the demo's training samples (`ttt` teacher-forced steps); returns its
    checkpoint folder."""
    samples = samples_for(shape, demo, root)
    records = _records(samples)
    target = load_file(str(demo.root / "target" / "model.safetensors"))
    embed, head = target["model.embed_tokens.weight"], target["lm_head.weight"]
    vocab_size, hidden = embed.shape
    vocab = draft_vocab(records, vocab_size, 256)
    cfg = replace(
        draft_config(vocab_size, 256, hidden),
        intermediate_size=128,
        num_layers=shape.layers,
        num_fc_blocks=len(shape.wiring),
        aux_layer_ids=shape.ids,
        fc_norm=shape.fc_norm,
        norm_before_fc=shape.norm_before_fc,
        norm_output=shape.norm_output,
        norm_before_residual=shape.norm_before_residual,
    )
    draft = init_draft(cfg, vocab, embed, head, seed, qk_norm=shape.qk_norm)
    train_draft(
        draft,
        records,
        epochs=epochs,
        batch=8,
        seed=seed,
        lr=1e-2,
        step_weights=(1.0, 0.8)[:ttt],
        wiring=shape.wiring,
    )
    out = root / shape.name
    if out.exists():
        shutil.rmtree(out)
    write_draft(draft_files(draft, verifier_name=str((demo.root / "target").resolve())), out)
    return out


def with_num_aux(src: Path, out: Path) -> Path:
    """A copy whose transformer_layer_config says num_aux_hidden_states (vLLM 0.32's Llama class
    sizes fc from it, never from the top-level ids)."""
    shutil.copytree(src, out)
    cfg = json.loads((out / "config.json").read_text())
    cfg["transformer_layer_config"]["num_aux_hidden_states"] = len(
        cfg["eagle_aux_hidden_state_layer_ids"]
    )
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    return out


def with_hidden_norms(src: Path, out: Path) -> Path:
    """A copy holding layers.{i}.hidden_norm.weight = layers.{i}.input_layernorm.weight for
    i >= 1 (SGLang 0.5.23 normalises those layers' input with hidden_norm)."""
    from safetensors.torch import save_file

    shutil.copytree(src, out)
    w = load_file(str(out / "model.safetensors"))
    layers = json.loads((out / "config.json").read_text())["transformer_layer_config"]
    for i in range(1, layers["num_hidden_layers"]):
        w[f"layers.{i}.hidden_norm.weight"] = w[f"layers.{i}.input_layernorm.weight"].clone()
    save_file(w, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


def main(out: Path) -> None:
    """Every shape trained (20 epochs, two TTT steps) into OUT/<name>, the N != 3 ones also as
    OUT/<name>-n (num_aux_hidden_states stated), the two-layer one as OUT/deep-hidden-norm: what
    the engine stages serve (.ci/vllm, .ci/sglang, .ci/llamacpp)."""
    from inspector.demo_paths import demo_paths

    demo = demo_paths()
    out.mkdir(parents=True, exist_ok=True)
    for name, shape in SHAPES.items():
        folder = train_shape(shape, demo, out, epochs=20, ttt=2)
        if len(shape.wiring) != 3:
            with_num_aux(folder, out / f"{name}-n")
        print(f"trained_shapes.py: {name} -> {folder}", flush=True)
    with_hidden_norms(out / "deep-n", out / "deep-hidden-norm")


if __name__ == "__main__":
    import sys

    torch.set_num_threads(2)
    main(Path(sys.argv[1]))
