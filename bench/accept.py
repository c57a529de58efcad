"""Speed and memory of the serving replay (`eagle-inspect accept`) against `eval` in one process.

    python bench/accept.py                          # mid-size draft, 1K-token samples, CPU
    python bench/accept.py --device cuda --size large

Part 1: positions/s of the replay, chain (topk 1) and trees (topk 4 and 8), over the same samples
and steps, and each one's ratio to `eval --ttt-steps S` timed in the same process (medians of
--repeats runs, fresh caches each run). Targets: a chain <= 1.5x eval, a tree <= 2K x.
Part 2: peak memory of `accept` on one long sample (fresh process each), against a 64-token run.
Part 3: `accept --sweep` of a 4 x 6 grid (steps 1-4 x chain, topk 2 N 4/8, topk 4 N 4/8/16; the
cells DraftSpec refuses left out) against its most expensive single setting (4 steps, topk 4,
16 tokens), medians in the same process. Target: the sweep within 2x.

    python bench/accept.py --part sweep --device cuda
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from scale import RUN_ONE, write_set  # noqa: E402

from inspector.evaluate import Evaluator  # noqa: E402
from inspector.formats import SampleSet  # noqa: E402
from inspector.serving.cost import sweep_grid  # noqa: E402
from inspector.serving.replay import Replayer  # noqa: E402
from inspector.serving.settings_sweep import run_sweep  # noqa: E402
from inspector.serving.spec import DraftSpec  # noqa: E402
from inspector.session import Inputs, load_evaluator  # noqa: E402


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device: torch.device, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def throughput(args: argparse.Namespace, draft: Path, samples: Path) -> None:
    inputs = Inputs(draft, [str(samples)])
    s = args.steps
    loaded = load_evaluator(inputs, device=args.device, dtype=args.dtype, ttt_steps=s)

    def fresh(steps: int) -> Evaluator:
        # the draft loaded once; the sample files and every cache anew each run
        cfg = loaded.draft.config
        files = SampleSet(
            [str(samples)], vocab_size=cfg.vocab_size, hidden_size=cfg.target_hidden_size
        )
        return Evaluator(loaded.draft, files, ttt_steps=steps, budget=loaded.budget)

    ev = fresh(s)
    device = ev.device
    w = ev.wiring("train")
    positions = sum(ev.samples[i].length for i in range(len(ev.samples)))
    print(f"## {len(ev.samples)} samples, {positions} positions, {args.size} draft, {device}")

    def run_eval() -> None:
        fresh(s).run([w])

    def run_replay(spec: DraftSpec):
        def go() -> None:
            e = fresh(s if spec.is_chain else 1)
            Replayer(e, spec).run([w])

        return go

    run_eval()  # warm-up: kernels, allocator
    base = timed(run_eval, device, args.repeats)
    print(f"eval --ttt-steps {s}: {base:.2f} s, {positions / base:,.0f} positions/s")
    specs = [DraftSpec(s), DraftSpec(s, 4, args.tokens4), DraftSpec(s, 8, args.tokens8)]
    for spec in specs:
        t = timed(run_replay(spec), device, args.repeats)
        bound = 1.5 if spec.is_chain else 2 * spec.topk
        print(
            f"accept {spec.mode} topk {spec.topk} N {spec.draft_tokens}: {t:.2f} s, "
            f"{positions / t:,.0f} positions/s, x{t / base:.2f} eval (target <= x{bound:g})",
            flush=True,
        )


# The 4 x 6 grid: 4 steps values x 6 (topk, draft tokens) columns.
SWEEP_STEPS = (1, 2, 3, 4)
SWEEP_COLUMNS = ((1, None), (2, 4), (2, 8), (4, 4), (4, 8), (4, 16))


def sweep_cost(args: argparse.Namespace, draft: Path, samples: Path) -> None:
    inputs = Inputs(draft, [str(samples)])
    loaded = load_evaluator(inputs, device=args.device, dtype=args.dtype, ttt_steps=1)
    cfg = loaded.draft.config

    def fresh(steps: int) -> Evaluator:
        # as in part 1: the draft loaded once, the samples and every cache anew each run
        files = SampleSet(
            [str(samples)], vocab_size=cfg.vocab_size, hidden_size=cfg.target_hidden_size
        )
        return Evaluator(loaded.draft, files, ttt_steps=steps, budget=loaded.budget)

    specs = []
    for k, n in SWEEP_COLUMNS:
        got, _ = sweep_grid(SWEEP_STEPS, [k], [n or 2])
        specs += got
    heavy = max(specs, key=lambda s: (s.topk, s.steps, s.draft_tokens))
    device = loaded.device
    w = loaded.wiring("train")
    # chains read the TTT predictions, as `accept --sweep` and `accept --steps S` run them
    chain_steps = max(s.steps for s in specs if s.is_chain)

    def single() -> None:
        Replayer(fresh(1), heavy).run([w])

    def grid() -> None:
        run_sweep(fresh(chain_steps), specs, [w])

    single()  # warm-up
    # Interleaved, wall and CPU time: on a shared machine the wall clock measures the
    # neighbours too; CPU time (all threads) measures the work.
    wall: dict[str, list[float]] = {"single": [], "sweep": []}
    cpu: dict[str, list[float]] = {"single": [], "sweep": []}
    for _ in range(args.repeats):
        for name, fn in (("single", single), ("sweep", grid)):
            sync(device)
            w0, c0 = time.perf_counter(), time.process_time()
            fn()
            sync(device)
            wall[name].append(time.perf_counter() - w0)
            cpu[name].append(time.process_time() - c0)
    wm = {k: statistics.median(v) for k, v in wall.items()}
    cm = {k: statistics.median(v) for k, v in cpu.items()}
    print(
        f"\n## accept --sweep: {len(specs)} settings of a 4 x 6 grid ({args.size} draft, {device})"
    )
    print(
        f"single {heavy.steps} steps topk {heavy.topk} N {heavy.draft_tokens}: "
        f"{wm['single']:.2f} s wall, {cm['single']:.2f} s CPU"
    )
    print(
        f"sweep: {wm['sweep']:.2f} s wall, {cm['sweep']:.2f} s CPU: "
        f"x{wm['sweep'] / wm['single']:.2f} wall, x{cm['sweep'] / cm['single']:.2f} CPU "
        "the single setting (target <= x2)",
        flush=True,
    )


def memory(args: argparse.Namespace, work: Path) -> None:
    gb = 2**30

    def one(t: int) -> dict:
        draft, samples = write_set(work / f"{args.size}-{t}", args.size, 1, t, "bfloat16")
        argv = ["accept", str(draft), str(samples), "--wiring", "train", "--steps", str(args.steps)]
        argv += ["--topk", "8", "--draft-tokens", str(args.tokens8), "--device", args.device]
        argv += ["--json"]
        out = subprocess.run(
            [sys.executable, "-c", RUN_ONE, *argv],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            cwd=ROOT,
        )
        st = json.loads(out.stderr.strip().splitlines()[-1])
        if st["rc"] != 0:
            raise RuntimeError(out.stderr[-2000:])
        return st

    ref = one(64)
    print(f"\n## accept topk 8 on one sample: peak memory ({args.size} draft, {args.device})")
    print(f"64 tokens: peak RSS {ref['rss'] / gb:.2f} GB, {ref['wall']:.1f} s")
    for t in args.lengths:
        st = one(t)
        working = max(0, st["rss"] - ref["rss"])
        line = f"{t} tokens: peak RSS {st['rss'] / gb:.2f} GB (working {working / gb:.2f} GB, "
        line += f"{working / t / 1024:.0f} KB/token), {st['wall']:.1f} s"
        if st["cuda"] is not None:
            line += f", CUDA peak {st['cuda'] / gb:.2f} GB"
        print(line, flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="mid")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--samples", type=int, default=2)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--tokens4", type=int, default=8)
    ap.add_argument("--tokens8", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--lengths", type=int, nargs="*", default=[8192])
    ap.add_argument("--work", help="folder for the synthetic sets (default: a temporary one)")
    ap.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")
    ap.add_argument(
        "--part",
        choices=("all", "throughput", "memory", "sweep"),
        default="all",
        help="what to run",
    )
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.work or tmp)
        draft, samples = write_set(
            work / f"{args.size}-{args.seq_len}x{args.samples}",
            args.size,
            args.samples,
            args.seq_len,
            "bfloat16",
        )
        if args.part in ("all", "throughput"):
            throughput(args, draft, samples)
        if args.part in ("all", "sweep"):
            sweep_cost(args, draft, samples)
        if args.lengths and args.part in ("all", "memory"):
            memory(args, work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
