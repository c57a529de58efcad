"""Inputs shared by every command: the draft, the samples, the optional target head."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from inspector.errors import InputError


@dataclass
class Inputs:
    checkpoint: Path
    samples: list[str]
    target: Path | None
    embed: Path | None
    tokenizer: Path | None
    is_demo: bool


def resolve_inputs(args: argparse.Namespace) -> Inputs:
    """CKPT/SAMPLES as given, or the bundled demo (draft + samples/train + its target)."""
    target = Path(args.target) if getattr(args, "target", None) else None
    embed = Path(args.embed) if getattr(args, "embed", None) else None
    tokenizer = Path(args.tokenizer) if getattr(args, "tokenizer", None) else None
    if args.checkpoint is None:
        from inspector.demo_paths import demo_paths

        demo = demo_paths()
        samples = list(args.samples) or [str(demo.train_samples)]
        return Inputs(
            demo.draft, samples, target or demo.target, embed, tokenizer or demo.tokenizer, True
        )
    if not args.samples:
        raise InputError(
            args.checkpoint, None, "SAMPLES missing: pass a sample folder, glob or files after CKPT"
        )
    return Inputs(Path(args.checkpoint), list(args.samples), target, embed, tokenizer, False)


def load_evaluator(
    inputs: Inputs,
    *,
    device: str = "auto",
    dtype: str = "auto",
    ttt_steps: int = 1,
    strict: bool = True,
):
    """Load everything onto the device and return an Evaluator (torch imported here, not before).

    strict=False (the doctor) loads a faulty d2t or a missing head_dim so they can be reported.
    """
    from inspector.evaluate import Evaluator, resolve_device
    from inspector.formats import SampleSet, load_draft, read_target_head

    dev = resolve_device(device)
    draft = load_draft(
        inputs.checkpoint,
        embed=inputs.embed,
        target=inputs.target,
        dtype=dtype,
        device=dev,
        strict=strict,
    )
    cfg = draft.config
    samples = SampleSet(inputs.samples, vocab_size=cfg.vocab_size)
    head = None
    if inputs.target is not None:
        head = read_target_head(
            inputs.target, vocab_size=cfg.vocab_size, hidden_size=cfg.target_hidden_size
        ).to(dev, draft.dtype)
    return Evaluator(draft, samples, ttt_steps=ttt_steps, target_head=head)
