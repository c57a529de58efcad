"""`eagle-inspect capture TARGET INPUT --out DIR`: samples from a target model, for every command."""

from __future__ import annotations

import argparse
import shlex

from rich.console import Console
from rich.markup import escape


def run_capture(args: argparse.Namespace) -> int:
    from inspector.capture.run import CaptureSettings, capture, prepare
    from inspector.progress import progress_bar

    err = Console(stderr=True, highlight=False, soft_wrap=True)
    settings = CaptureSettings(
        layers=args.layers,
        draft=args.draft,
        engine=args.engine,
        generate=args.generate,
        past_stop=args.past_stop,
        temperature=args.temperature,
        seed=args.seed,
        max_length=args.max_length,
        dtype=args.dtype,
        device=args.device,
        device_map=args.device_map,
        save_dtype=args.save_dtype,
    )
    prepared = prepare(args.target_model, args.input, settings)
    for note in prepared.notes:
        err.print(f"[dim]note:[/] {escape(note)}")
    with progress_bar("capturing") as bar:
        res = capture(
            args.target_model, args.input, args.out, settings, progress=bar, prepared=prepared
        )
    rate = f", {res.tokens / res.seconds:,.0f} tokens/s" if res.seconds > 0 and res.tokens else ""
    skipped = f" ({res.skipped} already there)" if res.skipped else ""
    slots = ", ".join(map(str, res.plan.slots))
    err.print(
        f"captured {res.written} samples{skipped}, {res.tokens:,} tokens in {res.seconds:.1f}s"
        f"{rate} -> {escape(str(res.out))}  (slots, HF indices: {slots})"
    )
    if res.plan.engine is not None:
        n = len(res.plan.engine.hf_indices)
        err.print(
            f"slots 0..{n - 1} are what {res.plan.engine.engine} feeds this draft: the "
            f"'train' wiring (slots 0..{n - 1}) is the serving number"
        )
    if args.draft:
        cmd = ["eagle-inspect", "eval", args.draft, str(res.out), "--target", args.target_model]
        err.print(f"next: {escape(shlex.join(cmd))}")
    return 0
