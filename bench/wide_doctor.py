"""The doctor on the widest published draft configs at their real width, on CPU.

    python bench/wide_doctor.py                      # the 3 widest configs in ../shared/configs
    python bench/wide_doctor.py --configs DIR --top 2 --seq-len 48
    python bench/wide_doctor.py --synthetic 4k --samples 8 --seq-len 2048   # a 4096-wide draft

Each config becomes a random-weight checkpoint at its published hidden size, heads and MLA ranks
(only the vocabulary and the MLP shrink: they do not set the width), stored in its published
dtype, with two samples of --seq-len tokens; `eagle-inspect doctor` runs on it in a subprocess
and the wall time and peak RSS are printed (the aim: under a minute on two CPU cores).
With --synthetic SIZE, a draft of `inspector.synthetic`'s size (bf16, random weights) and
--samples samples of --seq-len tokens (a 30% prompt each) instead.
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
    ap.add_argument("--synthetic", metavar="SIZE", help="a synthetic draft of this size instead")
    ap.add_argument("--samples", type=int, default=2, help="samples (--synthetic)")
    args = ap.parse_args()
    if args.synthetic:
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
            timed(f"synthetic {args.synthetic}", draft, samples, None, args)
        return
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
            name = f"{f.stem}: hidden {ck.config['hidden_size']}, {ck.slots} slots"
            timed(name, ck.folder, ck.samples, ck.embed, args)


def timed(name: str, draft: Path, samples: Path, embed: Path | None, args) -> None:
    """Run the doctor in a fresh process and print its wall time, stages and reading."""
    cmd = [sys.executable, "-m", "inspector", "doctor", str(draft), str(samples)]
    cmd += ["--device", "cpu", "--json", "--samples", str(max(args.samples, 2))]
    if embed is not None:
        cmd += ["--embed", str(embed)]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
    status = f"exit {r.returncode}"
    if r.returncode in (0, 1):
        out = json.loads(r.stdout)
        status += f", stages {out.get('seconds', {})}, reading {out.get('reading')}"
    else:
        status += f": {r.stderr.strip().splitlines()[-1] if r.stderr else ''}"
    print(
        f"{name}, {args.seq_len}-token samples: doctor {wall:.1f} s wall, "
        f"peak RSS so far {rss:.2f} GB; {status}",
        flush=True,
    )


if __name__ == "__main__":
    main()
