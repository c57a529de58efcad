"""eval and doctor at the stored dtype against float32, on CPU: the time ratios.

    python bench/dtype_speed.py                    # mid-size draft (H 1024), 2 samples of 48 tokens
    python bench/dtype_speed.py --size large --seq-len 48 --threads 16

A synthetic draft and samples are written once per dtype (the draft stored in that dtype, as
real checkpoints are: bf16 or fp16), then `Evaluator.run` (eval's path, --ttt-steps 3, the two
default wirings) and `diagnose` (doctor's) run on them, twice for a half-precision draft: computed
in its stored dtype (`--dtype bfloat16`) and by default (`auto`: float32 on a CPU). Prints seconds
and the ratio to the float32 draft's; the aim for the default is at most 1.5x. Also the matmul layouts the forward avoids, measured on the
same machine: x @ W.T (used everywhere) against x @ W.T.contiguous() (the slow CPU kernel).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from inspector.doctor import diagnose  # noqa: E402
from inspector.evaluate import Evaluator  # noqa: E402
from inspector.formats import SampleSet, load_draft  # noqa: E402
from inspector.synthetic import SIZES, SyntheticSpec, write_synthetic  # noqa: E402

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def layouts(h: int, rows: int, dtype: torch.dtype) -> tuple[float, float]:
    x = torch.randn(rows, h).to(dtype)
    w = torch.randn(h, h).to(dtype)
    wt = w.T.contiguous()
    x @ w.T  # warm up
    fast = min(timed(lambda: x @ w.T) for _ in range(3))
    slow = min(timed(lambda: x @ wt) for _ in range(2))
    return fast, slow


def run_eval(draft, samples: Path) -> None:
    ev = Evaluator(draft, SampleSet(samples), ttt_steps=3)
    ev.run([ev.wiring("train"), ev.wiring("serve")])


def run_doctor(draft, samples: Path) -> None:
    diagnose(Evaluator(draft, SampleSet(samples), ttt_steps=3))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="mid", choices=sorted(SIZES))
    ap.add_argument("--seq-len", type=int, default=48)
    ap.add_argument("--samples", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--dtypes", default="float32,bfloat16,float16")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    h = SIZES[args.size][0]
    print(
        f"size {args.size} (H {h}), {args.samples} samples x {args.seq_len} tokens, "
        f"{torch.get_num_threads()} threads, torch {torch.__version__}"
    )
    results: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.dtypes.split(","):
            dtype = DTYPES[name]
            spec = SyntheticSpec(
                size=args.size, n_samples=args.samples, seq_len=args.seq_len, dtype=dtype
            )
            ckpt, samples = write_synthetic(Path(tmp) / name, spec)
            runs = {"stored": load_draft(ckpt, dtype=name)}  # computed in its stored dtype
            if dtype != torch.float32:
                runs["auto"] = load_draft(ckpt)  # the default: upcast on the CPU
                assert runs["auto"].dtype == torch.float32
            for how, draft in runs.items():
                assert how == "auto" or draft.dtype == dtype
                run_eval(draft, samples)  # warm-up: kernels, allocator
                results[f"{name} {how}"] = (
                    timed(lambda d=draft, s=samples: run_eval(d, s)),
                    timed(lambda d=draft, s=samples: run_doctor(d, s)),
                )
    base_e, base_d = results.get("float32 stored", next(iter(results.values())))
    print(
        "stored: computed in the stored dtype (--dtype NAME); auto: the default (float32 on a CPU)"
    )
    print(f"{'stored dtype':17} {'eval s':>8} {'ratio':>6} {'doctor s':>9} {'ratio':>6}")
    for name, (e, d) in results.items():
        print(f"{name:17} {e:8.2f} {e / base_e:6.2f} {d:9.2f} {d / base_d:6.2f}")
    print("matmul layout, [48, H] x [H, H]:  x @ W.T   x @ W.T.contiguous()")
    for name in args.dtypes.split(","):
        fast, slow = layouts(h, 48, DTYPES[name])
        print(f"  {name:10} {fast * 1e3:10.2f} ms {slow * 1e3:12.2f} ms ({slow / fast:.1f}x)")


if __name__ == "__main__":
    main()
