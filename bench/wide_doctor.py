"""The doctor on the widest published draft configs at their real width, on CPU.

    python bench/wide_doctor.py                      # every config in ../shared/configs, widest first
    python bench/wide_doctor.py --configs DIR --top 2 --seq-len 48

Each config becomes a random-weight checkpoint at its published hidden size, heads and MLA ranks
(only the vocabulary and the MLP shrink: they do not set the width), stored in its published
dtype, with two samples of --seq-len tokens; `eagle-inspect doctor` runs on it in a subprocess
and the wall time and peak RSS are printed (the aim: under a minute on two CPU cores).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import families  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", type=Path, default=ROOT.parent / "shared" / "configs")
    ap.add_argument("--top", type=int, default=3, help="the N widest configs")
    ap.add_argument("--seq-len", type=int, default=48)
    args = ap.parse_args()
    files = sorted(args.configs.glob("*.json"))
    if not files:
        sys.exit(f"no configs in {args.configs}")

    def width(f: Path) -> int:
        cfg = json.loads(f.read_text())
        cfg = cfg.get("transformer_layer_config", cfg)
        return int(cfg.get("hidden_size", 0))

    for f in sorted(files, key=width, reverse=True)[: args.top]:
        with tempfile.TemporaryDirectory() as tmp:
            try:
                ck = families.build(f, Path(tmp), seq_len=args.seq_len, keep_width=True)
            except Exception as e:  # a config the builder cannot write at full width
                print(f"{f.stem}: not built ({e})")
                continue
            cmd = [sys.executable, "-m", "inspector", "doctor", str(ck.folder), str(ck.samples)]
            cmd += ["--device", "cpu", "--json"]
            if ck.embed is not None:
                cmd += ["--embed", str(ck.embed)]
            t0 = time.perf_counter()
            r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
            wall = time.perf_counter() - t0
            rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
            status = f"exit {r.returncode}"
            if r.returncode in (0, 1):
                secs = json.loads(r.stdout).get("seconds", {})
                status += f", stages {secs}"
            else:
                status += f": {r.stderr.strip().splitlines()[-1] if r.stderr else ''}"
            print(
                f"{f.stem}: hidden {ck.config['hidden_size']}, {ck.slots} slots, "
                f"{args.seq_len}-token samples x 2: doctor {wall:.1f} s wall, "
                f"peak RSS so far {rss:.2f} GB; {status}",
                flush=True,
            )


if __name__ == "__main__":
    main()
