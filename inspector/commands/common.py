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
    slot_layers: list[int] | None = None  # HF index of every slot (--slot-layers)


def parse_slot_layers(text: str | None) -> list[int] | None:
    """`--slot-layers 0,2,4,6`: the HF hidden_states index of every slot (0 = embedding output,
    k = output of decoder layer k-1), overriding data_config.json."""
    if not text:
        return None
    parts = [p for p in text.replace(" ", "").strip("[]").split(",") if p]
    if not parts or not all(p.isascii() and p.isdigit() for p in parts):
        raise InputError(
            None, "--slot-layers", f"{text!r}: expected non-negative integers like 0,2,4,6"
        )
    return [int(p) for p in parts]


def resolve_inputs(args: argparse.Namespace) -> Inputs:
    """CKPT/SAMPLES as given, or the bundled demo (draft + samples/train + its target)."""
    target = Path(args.target) if getattr(args, "target", None) else None
    embed = Path(args.embed) if getattr(args, "embed", None) else None
    tokenizer = Path(args.tokenizer) if getattr(args, "tokenizer", None) else None
    slot_layers = parse_slot_layers(getattr(args, "slot_layers", None))
    if args.checkpoint is None:
        from inspector.demo_paths import demo_paths

        demo = demo_paths()
        samples = list(args.samples) or [str(demo.train_samples)]
        return Inputs(
            demo.draft,
            samples,
            target or demo.target,
            embed,
            tokenizer or demo.tokenizer,
            True,
            slot_layers,
        )
    if not args.samples:
        raise InputError(
            args.checkpoint, None, "SAMPLES missing: pass a sample folder, glob or files after CKPT"
        )
    return Inputs(
        Path(args.checkpoint), list(args.samples), target, embed, tokenizer, False, slot_layers
    )


def load_evaluator(
    inputs: Inputs,
    *,
    device: str = "auto",
    dtype: str = "auto",
    ttt_steps: int = 1,
    strict: bool = True,
    memory_budget: str | None = None,
):
    """Load everything onto the device and return an Evaluator (torch imported here, not before).

    strict=False (the doctor) loads a faulty d2t or a missing head_dim so they can be reported.
    """
    from inspector.evaluate import Evaluator, resolve_device
    from inspector.formats import SampleSet, load_draft, read_target_head
    from inspector.memory import resolve_budget

    dev = resolve_device(device)
    budget = resolve_budget(memory_budget, dev)
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
    return Evaluator(
        draft,
        samples,
        ttt_steps=ttt_steps,
        target_head=head,
        budget=budget,
        slot_layers=inputs.slot_layers,
    )
