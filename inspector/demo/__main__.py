"""``python -m inspector.demo build [--out DIR] [--seed N]`` and ``python -m inspector.demo run --out
DIR`` (a training run of the demo's draft, for ``eagle-inspect sweep``), ``python -m inspector.demo
block --out DIR`` (a DFlash block draft trained on the demo target, and a copy whose config lost
its ids), ``python -m inspector.demo specforge --out DIR`` (the demo draft in SpecForge's layout)"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from inspector.demo import DEFAULT_OUT
from inspector.engines import Engine

# the engines' names from the registry (a rename is one edit in inspector/engines/)
_SGLANG = Engine.SGLANG.display


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m inspector.demo", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser(
        "build",
        help="train the demo target and draft and write the demo files (~12 min on 2 cores)",
    )
    b.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})"
    )
    b.add_argument("--seed", type=int, default=0, help="seed for every random choice (default 0)")
    r = sub.add_parser(
        "run",
        help="train the demo's draft further on its saved samples, a checkpoint every few steps "
        "(a run for `eagle-inspect sweep`; ~3-5 min on 2 cores)",
    )
    r.add_argument("--out", type=Path, required=True, help="the run's folder (new or empty)")
    r.add_argument(
        "--demo", type=Path, default=DEFAULT_OUT, help=f"the demo (default {DEFAULT_OUT})"
    )
    r.add_argument("--epochs", type=int, default=24, help="epochs over the 48 samples (default 24)")
    r.add_argument("--every", type=int, default=9, help="steps between checkpoints (default 9)")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument(
        "--init",
        choices=("shipped", "scratch"),
        default="shipped",
        help="start from the shipped draft (default: a fine-tune that overfits) or from scratch",
    )
    k = sub.add_parser(
        "block",
        help="train a small DFlash block draft on the demo target's layer ids 0, 3, 5 (not the "
        "default spread) and write beside it a copy whose config lost its target_layer_ids "
        "(~30 s on one CPU thread)",
    )
    k.add_argument("--out", type=Path, required=True, help="the case's folder (new or empty)")
    k.add_argument(
        "--demo", type=Path, default=DEFAULT_OUT, help=f"the demo (default {DEFAULT_OUT})"
    )
    s = sub.add_parser(
        "specforge",
        help="write the demo draft in SpecForge's layout (the same weights: a flat "
        "LlamaForCausalLMEagle3 config, its ids under eagle_config, midlayer.* tensors, no "
        f"embedding), as SpecForge's {_SGLANG} export writes a draft",
    )
    s.add_argument("--out", type=Path, required=True, help="a new folder")
    s.add_argument(
        "--demo", type=Path, default=DEFAULT_OUT, help=f"the demo (default {DEFAULT_OUT})"
    )
    args = parser.parse_args(argv)
    if args.command == "specforge":
        from inspector.demo.specforge_layout import write_specforge_demo
        from inspector.errors import InputError

        try:
            out = write_specforge_demo(args.out, args.demo)
        except InputError as e:
            print(f"{parser.prog} specforge: error: {e}", file=sys.stderr)
            return 2
        cfg = json.loads((out / "config.json").read_text())
        ids = cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
        print(
            f"wrote {args.out}: the demo draft in SpecForge's layout ({cfg['architectures'][0]}, "
            f"eagle_config ids {ids}, midlayer.* tensors, no embedding)"
        )
        return 0
    if args.command == "block":
        from inspector.demo.block_draft import build_block_demo

        build_block_demo(args.out, args.demo, log=lambda line: print(line, file=sys.stderr))
        return 0
    if args.command == "run":
        from inspector.demo.run import build_run

        build_run(
            args.out,
            args.demo,
            epochs=args.epochs,
            every=args.every,
            seed=args.seed,
            init=args.init,
        )
        return 0
    from inspector.demo.build import build

    build(args.out, seed=args.seed)  # progress goes to stderr
    return 0


if __name__ == "__main__":
    sys.exit(main())
