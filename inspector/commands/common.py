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
    inputs: Inputs, *, device: str = "auto", dtype: str = "auto", ttt_steps: int = 1
):
    """Load everything onto the device and return an Evaluator (torch imported here, not before)."""
    from inspector.evaluate import Evaluator, resolve_device
    from inspector.formats import SampleSet, load_draft, read_target_head

    dev = resolve_device(device)
    draft = load_draft(
        inputs.checkpoint, embed=inputs.embed, target=inputs.target, dtype=dtype, device=dev
    )
    samples = SampleSet(inputs.samples)
    head = read_target_head(inputs.target) if inputs.target is not None else None
    if head is not None:
        head = head.to(dev)
        head.lm_head = head.lm_head.to(draft.dtype)
        if head.norm_weight is not None:
            head.norm_weight = head.norm_weight.to(draft.dtype)
    return Evaluator(draft, samples, ttt_steps=ttt_steps, target_head=head)
