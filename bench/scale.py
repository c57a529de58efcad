"""Memory and time at the sizes users have: long samples, and the app's fill over many samples.

    python bench/scale.py                          # lengths 1K..32K on CPU, then the app fill
    python bench/scale.py --lengths 1024 8192 --app-samples 0
    python bench/scale.py --device cuda --size large --lengths 2048 8192 32768 --app-samples 0

Part 1, one sample per length, `eagle-inspect eval --ttt-steps 3` in a fresh process each: wall
time, peak RSS (and on CUDA the peak allocated device memory). A 64-token run in the same way is
the reference: "working" memory is the peak above it, and its per-token ratio must stay flat as
the length grows (linear memory); time per token grows with the length because attention is
quadratic in compute (not in memory).

Part 2, the app opened on N samples with the background fill on (train and serve wirings): the
process's anonymous memory (RssAnon) as the fill proceeds, the growth per further sample over the
second half, and the latency of a key press (`→`, until the frame that shows it) during the fill.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

RUN_ONE = textwrap.dedent(
    """
    import io, json, resource, sys, time, contextlib
    t0 = time.perf_counter()
    from inspector.cli import main
    with contextlib.redirect_stdout(io.StringIO()):
        rc = main(sys.argv[1:])
    wall = time.perf_counter() - t0
    peak_cuda = None
    if "torch" in sys.modules:
        import torch
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            peak_cuda = torch.cuda.max_memory_allocated()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"rc": rc, "wall": wall, "rss": rss, "cuda": peak_cuda}), file=sys.stderr)
    """
)


def write_set(root: Path, size: str, n: int, seq_len: int, dtype: str) -> tuple[Path, Path]:
    import torch

    from inspector.synthetic import SyntheticSpec, write_synthetic

    draft, samples = root / "draft", root / "samples"
    if (draft / "config.json").is_file() and len(list(samples.glob("*.pt"))) >= n:
        return draft, samples
    spec = SyntheticSpec(size=size, n_samples=n, seq_len=seq_len, dtype=getattr(torch, dtype))
    write_synthetic(root, spec)
    return draft, samples


def run_eval(draft: Path, samples: Path, device: str, steps: int) -> dict:
    argv = ["eval", str(draft), str(samples), "--ttt-steps", str(steps), "--wiring", "train"]
    argv += ["--device", device, "--json"]
    out = subprocess.run(
        [sys.executable, "-c", RUN_ONE, *argv],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
    )
    last = out.stderr.strip().splitlines()[-1] if out.stderr.strip() else ""
    try:
        stats = json.loads(last)
    except ValueError:
        raise RuntimeError(f"eval failed: {out.stderr[-2000:]}") from None
    if stats["rc"] != 0:
        raise RuntimeError(f"eval exited {stats['rc']}: {out.stderr[-2000:]}")
    return stats


def lengths_table(args: argparse.Namespace, work: Path) -> None:
    gb = 2**30
    print(f"\n## one sample, eval --ttt-steps {args.steps}, {args.size} draft, {args.device}")
    ref_root = work / f"{args.size}-64"
    ref = run_eval(*write_set(ref_root, args.size, 1, 64, args.slot_dtype), args.device, args.steps)
    print(
        f"reference (64 tokens): peak RSS {ref['rss'] / gb:.2f} GB"
        + (f", CUDA peak {ref['cuda'] / gb:.2f} GB" if ref["cuda"] else "")
    )
    head = f"{'tokens':>7} {'wall s':>8} {'ms/token':>9} {'peak RSS GB':>12} {'working GB':>11}"
    head += f" {'KB/token':>9}" + (
        f" {'CUDA GB':>8} {'CUDA KB/tok':>11}" if args.device != "cpu" else ""
    )
    print(head)
    prev: float | None = None
    prev_t = 1
    for t in args.lengths:
        root = work / f"{args.size}-{t}"
        st = run_eval(*write_set(root, args.size, 1, t, args.slot_dtype), args.device, args.steps)
        working = max(0, st["rss"] - ref["rss"])
        line = (
            f"{t:>7} {st['wall']:>8.1f} {1000 * st['wall'] / t:>9.2f} {st['rss'] / gb:>12.2f}"
            f" {working / gb:>11.2f} {working / t / 1024:>9.1f}"
        )
        if st["cuda"] is not None:
            cw = st["cuda"] - (ref["cuda"] or 0)
            line += f" {st['cuda'] / gb:>8.2f} {cw / t / 1024:>11.1f}"
        if prev is not None:
            line += f"   x{working / max(prev, 1):.2f} working for x{t / prev_t:.0f} tokens"
        print(line, flush=True)
        prev, prev_t = working, t


def rss_anon() -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


async def press_and_wait(app, frames, key: str, done) -> float:
    """Seconds from a key event reaching the app to the first frame after the repaint that made
    `done()` true. The event goes straight to the driver: Pilot.press would also wait until the
    process's CPU is idle (up to a second), which it never is while the device thread fills."""
    from app_latency import frame_after
    from textual import events

    t0 = time.perf_counter()
    event = events.Key(key, None)
    event.set_sender(app)
    app._driver.send_message(event)
    return await frame_after(frames, t0, done)


async def app_fill(draft: Path, samples: Path, n: int, presses: int) -> None:
    from app_latency import Frames

    from inspector.session import Inputs
    from inspector.tui.app import InspectorApp

    inputs = Inputs(draft, [str(samples)], None, None, None, False)
    app = InspectorApp(inputs, device="cpu")
    mb = 2**20
    trace: list[tuple[int, int]] = []
    lat: list[float] = []
    async with app.run_test(size=(120, 40)) as pilot:
        main = app.main
        while main.state.view is None:
            await pilot.pause(0.05)
        await pilot.press("s", "p", "t")  # serve pinned, train current: the fill runs both
        frames = Frames(app)
        t0 = time.perf_counter()
        next_press = time.perf_counter() + 1.0
        while True:
            await pilot.pause(0.2)
            done = min((t.n_samples for t in main.state.totals.values()), default=0)
            if len(main.state.totals) >= 2:
                trace.append((done, rss_anon()))
            if presses and time.perf_counter() >= next_press and len(lat) < presses:
                row = main.state.rows.get(main.state.sample, 0)
                key = (
                    "right"
                    if row + 1 < (main.state.view.n_rows if main.state.view else 1)
                    else "home"
                )
                lat.append(
                    await press_and_wait(
                        app, frames, key, lambda r=row: main.state.rows.get(main.state.sample) != r
                    )
                )
                next_press = time.perf_counter() + 1.0
            if done >= n or (app.device is not None and not app.device.fill_pending() and done):
                break
        elapsed = time.perf_counter() - t0
        caches = app.device.ev.cache_bytes() if app.device and app.device.ev else {}
    print(f"\n## the app on {n} samples, background fill of 2 wirings ({elapsed:.0f} s)")
    marks = sorted({trace[len(trace) * q // 8][0] for q in range(8)} | {trace[-1][0]})
    by_done = {d: r for d, r in trace}
    for d in marks:
        print(f"  {d:>6} samples scored: RssAnon {by_done[d] / mb:8.0f} MB")
    half = [(d, r) for d, r in trace if d >= trace[-1][0] // 2]
    if len(half) > 1 and half[-1][0] > half[0][0]:
        growth = (half[-1][1] - half[0][1]) / (half[-1][0] - half[0][0])
        print(f"  growth over the second half: {growth / mb:+.3f} MB per sample")
    print(f"  peak RssAnon {max(r for _, r in trace) / mb:.0f} MB; caches {caches}")
    if lat:
        print(
            f"  key press during the fill: median {1000 * statistics.median(lat):.0f} ms, "
            f"max {1000 * max(lat):.0f} ms (n={len(lat)})"
        )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--device", default="cpu")
    p.add_argument("--size", default="mid", choices=["tiny", "mid", "large"])
    p.add_argument("--slot-dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--steps", type=int, default=3, help="TTT steps (default 3)")
    p.add_argument("--lengths", type=int, nargs="*", default=[1024, 4096, 8192, 16384, 32768])
    p.add_argument("--app-samples", type=int, default=2000, help="0 skips the app part")
    p.add_argument("--app-seq-len", type=int, default=256)
    p.add_argument("--presses", type=int, default=30, help="key presses during the fill")
    p.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "eagle-scale")
    args = p.parse_args()

    import torch

    print(
        f"python {sys.version.split()[0]}, torch {torch.__version__}, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    args.work.mkdir(parents=True, exist_ok=True)
    if args.lengths:
        lengths_table(args, args.work)
    if args.app_samples:
        root = args.work / f"app-{args.size}-{args.app_samples}x{args.app_seq_len}"
        draft, samples = write_set(
            root, args.size, args.app_samples, args.app_seq_len, args.slot_dtype
        )
        asyncio.run(app_fill(draft, samples, args.app_samples, args.presses))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
