"""Sample sets with many files: `eagle-inspect eval` over 1,000 and 10,000 small samples.

    python bench/many_files.py                 # 1000 and 10000 files of 64 tokens, tiny draft
    python bench/many_files.py --counts 2000 20000

Each run is a fresh process (as a user runs it). Printed: wall time, time per file, peak RSS,
and the ratio of the per-file times between the largest and the smallest set (1.0 = linear: no
step of discovery, loading or bookkeeping grows faster than the number of files).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RUN = textwrap.dedent(
    """
    import contextlib, io, json, resource, sys, time
    t0 = time.perf_counter()
    from inspector.cli import main
    with contextlib.redirect_stdout(io.StringIO()):
        rc = main(sys.argv[1:])
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"rc": rc, "wall": time.perf_counter() - t0, "rss": rss}), file=sys.stderr)
    """
)


def write_set(root: Path, n: int, seq_len: int) -> tuple[Path, Path]:
    import torch

    from inspector.synthetic import SyntheticSpec, write_synthetic

    draft, samples = root / "draft", root / "samples"
    if (draft / "config.json").is_file() and len(list(samples.glob("*.pt"))) >= n:
        return draft, samples
    # One sample written by the generator, copied n times (writing 10^4 random samples is slow).
    write_synthetic(root, SyntheticSpec(size="tiny", n_samples=1, seq_len=seq_len))
    data = (samples / "data_0.pt").read_bytes()
    for i in range(1, n):
        (samples / f"data_{i}.pt").write_bytes(data)
    del torch
    return draft, samples


def run(draft: Path, samples: Path) -> dict:
    argv = ["eval", str(draft), str(samples), "--json", "--device", "cpu"]
    out = subprocess.run(
        [sys.executable, "-c", RUN, *argv],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
    )
    stats = json.loads(out.stderr.strip().splitlines()[-1])
    if stats["rc"] != 0:
        raise RuntimeError(out.stderr[-2000:])
    return stats


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--counts", type=int, nargs="+", default=[1000, 10000])
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "eagle-many")
    args = p.parse_args()
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    print(f"{'files':>7} {'wall s':>8} {'ms/file':>8} {'peak RSS MB':>12}")
    per_file = []
    for n in args.counts:
        draft, samples = write_set(args.work / f"n{n}", n, args.seq_len)
        st = run(draft, samples)
        per_file.append(st["wall"] / n)
        print(f"{n:>7} {st['wall']:>8.1f} {1000 * st['wall'] / n:>8.2f} {st['rss'] / 2**20:>12.0f}")
    if len(per_file) > 1:
        print(f"per-file time, largest / smallest set: x{per_file[-1] / per_file[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
