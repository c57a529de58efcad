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
    """CKPT/SAMPLES as given, or the bundled demo (draft + samples/train + its target); with
    --prompts, SAMPLES captured from the target into a cache folder."""
    target = Path(args.target) if getattr(args, "target", None) else None
    embed = Path(args.embed) if getattr(args, "embed", None) else None
    tokenizer = Path(args.tokenizer) if getattr(args, "tokenizer", None) else None
    prompts = getattr(args, "prompts", None)
    if prompts and args.samples:
        raise InputError(prompts, "--prompts", "replaces SAMPLES: pass one or the other")
    if args.checkpoint is None:
        from inspector.demo_paths import demo_paths

        demo = demo_paths()
        samples = list(args.samples) or [str(demo.train_samples)]
        inputs = Inputs(
            demo.draft, samples, target or demo.target, embed, tokenizer or demo.tokenizer, True
        )
    elif not args.samples and not prompts:
        raise InputError(
            args.checkpoint, None, "SAMPLES missing: pass a sample folder, glob or files after CKPT"
        )
    else:
        inputs = Inputs(Path(args.checkpoint), list(args.samples), target, embed, tokenizer, False)
    if prompts:
        from inspector.capture.cache import prompts_samples

        device = getattr(args, "device", "auto") or "auto"
        inputs.samples = [
            str(prompts_samples(prompts, inputs.target, draft=inputs.checkpoint, device=device))
        ]
    return inputs


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
    samples = SampleSet(inputs.samples)
    head = None
    if inputs.target is not None:
        head = read_target_head(inputs.target).to(dev, draft.dtype)
    return Evaluator(draft, samples, ttt_steps=ttt_steps, target_head=head)
