"""``python -m inspector.demo build [--out DIR] [--seed N]``"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from inspector.demo import DEFAULT_OUT


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
    args = parser.parse_args(argv)
    from inspector.demo.build import build

    build(args.out, seed=args.seed)  # progress goes to stderr
    return 0


if __name__ == "__main__":
    sys.exit(main())
