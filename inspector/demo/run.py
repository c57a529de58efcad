"""A training run to sweep: the demo's draft trained further on the demo's saved training samples,
its checkpoints saved along the way as SpecForge names them (`epoch_{E}_step_{S}`).

The recipe is the demo build's own (`draft.train_draft`: the same optimizer, schedule and TTT
loss), on the 48 training samples the demo ships rather than the build's 400 sequences. From the
shipped draft (`init="shipped"`, the default) that is a fine-tune that overfits: the training
loss keeps falling while the accept length on held-out samples falls from the first checkpoints
on, the lesson of published runs (the best checkpoint by accept length is not the last, nor the
one with the lowest loss). `init="scratch"` starts from `draft.init_draft` instead (a short run
from scratch: far weaker drafts, rising).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

from inspector.demo.draft import (
    draft_config,
    init_draft,
    load_demo_draft,
    save_draft,
    train_draft,
)
from inspector.errors import InputError, setting_field
from inspector.formats.tensorfiles import load_torch_file

DEFAULT_EPOCHS = 24
DEFAULT_EVERY = 9  # optimizer steps between checkpoints (3 per epoch on 48 samples, batch 16)


def _records(folder: Path) -> list[dict]:
    files = sorted(folder.glob("data_*.pt"), key=lambda p: int(p.stem.split("_")[1]))
    if not files:
        raise InputError(folder, None, "no data_*.pt samples: build the demo first")
    out = []
    for f in files:
        d = load_torch_file(f)
        if not isinstance(d, dict):
            raise InputError(f, None, "not a speculators v1 sample (a dict)")
        out.append({k: d[k] for k in ("input_ids", "hidden_states", "loss_mask")})
    return out


def build_run(
    out: Path,
    demo: Path,
    *,
    epochs: int = DEFAULT_EPOCHS,
    every: int = DEFAULT_EVERY,
    seed: int = 0,
    batch: int = 16,
    lr: float = 3e-3,
    init: str = "shipped",
    log=lambda s: print(s, file=sys.stderr),
) -> list[Path]:
    """Train the run and write a checkpoint every `every` optimizer steps (and the last) to
    OUT/epoch_{E}_step_{S}; returns the folders written."""
    from inspector.draft import VocabMap

    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise InputError(out, setting_field("out"), "exists and is not empty")
    shipped = load_file(str(demo / "draft" / "model.safetensors"))
    target = load_file(str(demo / "target" / "model.safetensors"))
    vocab = VocabMap(d2t=shipped["d2t"], t2d=shipped["t2d"])
    embed, head = target["model.embed_tokens.weight"], target["lm_head.weight"]
    if init == "shipped":
        draft = load_demo_draft(demo / "draft")
        draft.weights = {k: v.float().clone() for k, v in draft.weights.items()}
    elif init == "scratch":
        cfg = draft_config(embed.shape[0], int(vocab.d2t.numel()), embed.shape[1])
        draft = init_draft(cfg, vocab, embed, head, seed)
    else:
        raise InputError(None, setting_field("init"), f"{init!r}: shipped or scratch")
    records = _records(demo / "samples" / "train")
    written: list[Path] = []
    verifier = str((demo / "target").resolve())

    def save(step: int, epoch: int) -> None:
        folder = out / f"epoch_{epoch}_step_{step}"
        with torch.no_grad():
            save_draft(draft, folder, verifier_name=verifier)
        written.append(folder)
        log(f"saved {folder}")

    last = {"step": 0, "epoch": 0}

    def on_step(step: int, epoch: int) -> None:
        last.update(step=step, epoch=epoch)
        if step % every == 0:
            save(step, epoch)

    out.mkdir(parents=True, exist_ok=True)
    save(0, 0)  # where the run starts
    train_draft(
        draft,
        records,
        epochs=epochs,
        batch=batch,
        seed=seed + 3,
        lr=lr,
        on_step=on_step,
        progress=log,
    )
    if not written or written[-1].name != f"epoch_{last['epoch']}_step_{last['step']}":
        save(last["step"], last["epoch"])
    return written
