"""What `doctor --trace` adds to the doctor, at a width users run, on CPU.

    python bench/trace_cost.py                          # a 4096-wide bf16 draft, 2 x 2048 tokens
    python bench/trace_cost.py --synthetic 4k --seq-len 4096 --repeats 3

The same doctor runs in fresh processes with and without `--trace` (the reference, in the same
invocation); the median wall time of each, their ratio, and each run's peak RSS are printed.
The trace keeps its stages bounded (`doctor.trace.run.LOGIT_BYTES`), so its memory is the
trained path's stages beside one engine path's, whatever the sample's length.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(cmd: list[str]) -> tuple[float, float, int]:
    """(wall seconds, peak RSS of the child in GiB, exit code) of one fresh process."""
    t0 = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-c", _CHILD, *cmd], capture_output=True, text=True, cwd=ROOT
    )
    wall = time.perf_counter() - t0
    rss = float(r.stdout.strip().splitlines()[-1]) if r.returncode in (0, 1) else float("nan")
    return wall, rss, r.returncode


# the doctor in-process, then its own peak RSS (ru_maxrss of RUSAGE_SELF, KiB on Linux)
_CHILD = """
import resource, sys
from inspector.cli import main
sys.stdout = open("/dev/null", "w")
code = main(sys.argv[1:])
sys.stdout = sys.__stdout__
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)
sys.exit(int(code))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--synthetic", default="4k", help="inspector.synthetic's size")
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--samples", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    import torch

    from inspector.synthetic import SyntheticSpec, write_synthetic

    with tempfile.TemporaryDirectory() as tmp:
        spec = SyntheticSpec(
            size=args.synthetic,
            n_samples=args.samples,
            seq_len=args.seq_len,
            dtype=torch.bfloat16,
        )
        draft, samples = write_synthetic(Path(tmp), spec)
        base = ["doctor", str(draft), str(samples), "--device", "cpu", "--json"]
        base += ["--samples", str(args.samples)]
        plain, traced = [], []
        for _ in range(args.repeats):
            plain.append(run(base))
            traced.append(run([*base, "--trace"]))
        for name, runs in (("doctor", plain), ("doctor --trace", traced)):
            walls = [w for w, _, _ in runs]
            rss = max(r for _, r, _ in runs)
            codes = sorted({c for _, _, c in runs})
            print(
                f"{name}: median {statistics.median(walls):.1f} s wall, "
                f"peak RSS {rss:.2f} GiB, exit {codes}",
                flush=True,
            )
        ratio = statistics.median(w for w, _, _ in traced) / statistics.median(
            w for w, _, _ in plain
        )
        print(
            f"{args.synthetic} draft, {args.samples} x {args.seq_len} tokens: --trace costs "
            f"{ratio:.2f}x the doctor's wall time"
        )


if __name__ == "__main__":
    main()
