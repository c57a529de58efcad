"""Latency of the inspector app, driven headless: first paint and key press -> updated screen.

    python bench/app_latency.py                  # the demo (if built) and a mid-size random draft
    python bench/app_latency.py --only mid --samples 8
    python bench/app_latency.py --screenshot assets/screenshots/app.svg   # the README image
    python bench/app_latency.py --fill 300 --presses 100     # only: key presses during the fill

Measures, as medians over repeats:
  first paint     from the first import of our package (in a fresh process, as the CLI does) to the
                  first frame on screen; torch must not be imported by then;
  position move   `→` to the first frame that shows the new position;
  sample switch   cached (`]` to a prefetched sample) and uncached (Enter on a far sample in the
                  sample list: a forward runs on the device thread);
  wiring toggle   first time (`s` on a sample never run under serve) and returning (`t`/`s` to a
                  wiring already computed for the sample).
"Updated screen" is the first compositor frame produced after the change was applied (frames are
captured where the headless driver would write them). The background fill is off, so the
device thread does only what the keys ask for.
The mid case is inspector.synthetic's size "mid" (H 1024, vocab 32000/8000) with 2048-token samples.

With --fill N: the app on N mid-size samples of --fill-seq-len tokens (default 256) on CPU, the
background fill on (serve pinned, train current: two wirings per sample); `→` pressed every
--press-every seconds while the fill runs (up to --presses), each timed from the key event reaching
the app to the first frame that shows the moved cursor. Reports p50/p99/max of those and the fill
throughput (samples scored under both wirings per second, from the first fill result to the last).
"""

from __future__ import annotations

import argparse
import asyncio
import math
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

from inspector.session import Inputs  # noqa: E402


def demo_inputs() -> Inputs | None:
    demo = ROOT / "assets" / "demo"
    if not (demo / "draft" / "config.json").is_file():
        return None
    tok = demo / "target" / "tokenizer.json"
    return Inputs(
        demo / "draft",
        [str(demo / "samples" / "train")],
        demo / "target",
        None,
        tok if tok.is_file() else None,
        True,
    )


def mid_inputs(n_samples: int, seq_len: int) -> Inputs:
    from inspector.synthetic import SyntheticSpec, write_synthetic

    root = Path(tempfile.gettempdir()) / f"eagle-inspect-bench-mid-{n_samples}x{seq_len}"
    draft, samples = root / "draft", root / "samples"
    if not (draft / "config.json").is_file() or len(list(samples.glob("*.pt"))) < n_samples:
        print(f"writing the mid-size random draft and {n_samples} samples to {root} …", flush=True)
        write_synthetic(root, SyntheticSpec(size="mid", n_samples=n_samples, seq_len=seq_len))
    return Inputs(draft, [str(samples)], None, None, None, False)


# --- first paint (fresh processes) -----------------------------------------------------------------
FIRST_PAINT = textwrap.dedent(
    """
    import time
    t0 = time.perf_counter()
    import sys
    from inspector.cli import build_parser
    from inspector.commands.open import build_app
    args = build_parser().parse_args(sys.argv[1:])
    app = build_app(args)
    async def auto(pilot):
        while app.t_first_paint is None:
            await pilot.pause(0.01)
        app.exit()
    app.run(headless=True, size=(120, 40), auto_pilot=auto)
    print(app.t_first_paint - t0, app.torch_at_first_paint, flush=True)
    import os
    os._exit(0)  # the device thread is still importing torch: do not wait for it
    """
)


def first_paint(inputs: Inputs, repeats: int) -> tuple[float, bool]:
    argv = ["open", str(inputs.checkpoint), *inputs.samples]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    times, torch_seen = [], False
    for _ in range(repeats):
        out = subprocess.run(
            [sys.executable, "-c", FIRST_PAINT, *argv],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=120,
        )
        if out.returncode != 0:
            raise RuntimeError(out.stderr)
        t, torch_then = out.stdout.split()
        times.append(float(t))
        torch_seen |= torch_then == "True"
    return statistics.median(times), torch_seen


def interpreter_start(repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


# --- key latencies (one headless app) -------------------------------------------------------------
class Frames:
    """Timestamps of every frame the compositor produces, and of every repaint of the panels."""

    def __init__(self, app) -> None:
        self.frames: list[float] = []
        self.paints: list[float] = []
        real = app._display

        def display(screen, renderable):
            if renderable is not None:
                self.frames.append(time.perf_counter())
            return real(screen, renderable)

        app._display = display
        main = app.main
        for name in ("paint_position", "paint_view"):
            method = getattr(main, name)

            def wrapped(*a, _m=method, **kw):
                result = _m(*a, **kw)
                self.paints.append(time.perf_counter())
                return result

            setattr(main, name, wrapped)

    def first_after(self, t: float) -> float | None:
        return next((f for f in self.frames if f >= t), None)


async def wait_idle(pilot) -> None:
    app = pilot.app
    while True:
        await pilot.pause(0.01)
        if not app.main.state.pending and app.device is not None and app.device.idle:
            await pilot.pause(0.05)
            if app.device.idle and not app.main.state.pending:
                return


async def frame_after(frames: Frames, t0: float, done) -> float:
    """Seconds from `t0` to the first frame after the repaint that made `done()` true."""
    while not done():
        await asyncio.sleep(0.001)
    t_paint = max((p for p in frames.paints if p >= t0), default=t0)
    while (f := frames.first_after(t_paint)) is None:
        await asyncio.sleep(0.001)
    return f - t0


async def timed_key(pilot, frames: Frames, key: str, done) -> float:
    """Seconds from the key press to the first frame after the repaint that made `done()` true."""
    t0 = time.perf_counter()
    await pilot.press(key)
    return await frame_after(frames, t0, done)


async def key_latencies(inputs: Inputs, moves: int, switches: int) -> dict[str, list[float]]:
    from inspector.tui.app import InspectorApp

    # without the first look: its search would run on the device thread under the measured keys
    app = InspectorApp(inputs, fill=False, first_look=False)
    out: dict[str, list[float]] = {
        k: []
        for k in (
            "position move",
            "sample switch cached",
            "sample switch uncached",
            "wiring toggle first",
            "wiring toggle returning",
        )
    }
    async with app.run_test(size=(120, 40)) as pilot:
        frames = Frames(app)
        while app.main.state.view is None:
            await pilot.pause(0.05)
        await wait_idle(pilot)
        main = app.main
        n = len(main.state.session.files)

        # position moves
        for _ in range(moves):
            target = main.state.rows[main.state.sample] + 1
            out["position move"].append(
                await timed_key(
                    pilot, frames, "right", lambda t=target: main.state.rows[main.state.sample] == t
                )
            )

        # cached sample switches: ] onto the prefetched next sample
        for _ in range(min(switches, n - 1)):
            await wait_idle(pilot)
            s = main.state.sample + 1
            out["sample switch cached"].append(
                await timed_key(
                    pilot,
                    frames,
                    "right_square_bracket",
                    lambda s=s: main.state.view is not None and main.state.view.sample == s,
                )
            )
        visited = set(range(main.state.sample + 2))

        # uncached sample switches: Enter on a far row of the sample list
        lst = main.query_one("SampleList")
        far = [
            i
            for i in range(n - 1, -1, -3)
            if i not in visited and i - 1 not in visited and i + 1 not in visited
        ][:switches]
        for s in far:
            await wait_idle(pilot)
            lst.focus()
            lst.show_sample(s)
            await pilot.pause()
            out["sample switch uncached"].append(
                await timed_key(
                    pilot,
                    frames,
                    "enter",
                    lambda s=s: main.state.view is not None and main.state.view.sample == s,
                )
            )
            visited |= {s - 1, s, s + 1}
        main.set_focus(None)

        # wiring toggles on samples never run under serve
        serve = main.state.session.presets["serve"]
        train = main.state.session.presets["train"]
        for s in far[:switches] or [main.state.sample]:
            main.set_sample(s)
            await wait_idle(pilot)
            if main.state.wiring != train:
                main.set_wiring(train)
                await wait_idle(pilot)

            def on(w):
                return lambda: (
                    main.state.view is not None
                    and main.state.view.wiring == w
                    and not main.state.pending
                )

            out["wiring toggle first"].append(await timed_key(pilot, frames, "s", on(serve)))
            await wait_idle(pilot)
            for key, w in (("t", train), ("s", serve), ("t", train)):
                out["wiring toggle returning"].append(await timed_key(pilot, frames, key, on(w)))
                await wait_idle(pilot)
    return out


# --- key presses during the background fill --------------------------------------------------------
async def press_and_wait(app, frames: Frames, key: str, done) -> float:
    """Seconds from a key event reaching the app to the first frame after the repaint that made
    `done()` true. The event goes straight to the driver: Pilot.press would also wait until the
    process's CPU is idle (up to a second), which it never is while the device thread fills."""
    from textual import events

    t0 = time.perf_counter()
    event = events.Key(key, None)
    event.set_sender(app)
    app._driver.send_message(event)
    return await frame_after(frames, t0, done)


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1), nearest rank: p99 of 100 values is the second largest."""
    v = sorted(values)
    return v[min(len(v) - 1, max(0, math.ceil(q * len(v)) - 1))]


async def fill_latency(
    inputs: Inputs, n: int, presses: int, every: float, *, fill: bool = True
) -> dict:
    """Key presses spread over the fill of n samples; see the module docstring. fill=False: the
    same presses with the fill off (the floor the machine's load sets), `presses` of them."""
    from inspector.tui.app import InspectorApp

    app = InspectorApp(inputs, device="cpu", fill=fill, first_look=False)
    lat: list[float] = []
    async with app.run_test(size=(120, 40)) as pilot:
        main = app.main
        while main.state.view is None:
            await pilot.pause(0.05)
        await pilot.press("s", "p", "t")  # serve pinned, train current: the fill runs both
        frames = Frames(app)

        def scored() -> int:
            if len(main.state.totals) < 2:
                return 0
            return min(t.n_samples for t in main.state.totals.values())

        while fill and scored() == 0:
            await asyncio.sleep(0.005)
        if not fill:
            await wait_idle(pilot)
        t0, d0 = time.perf_counter(), scored()
        next_press = t0 + every
        while True:
            await asyncio.sleep(0.02)
            done = scored()
            if not fill and len(lat) >= presses:
                break
            if fill and (done >= n or (app.device is not None and not app.device.fill_pending())):
                break
            if len(lat) < presses and time.perf_counter() >= next_press:
                row = main.state.rows.get(main.state.sample, 0)
                n_rows = main.state.view.n_rows if main.state.view else 1
                key = "right" if row + 1 < n_rows else "home"
                lat.append(
                    await press_and_wait(
                        app, frames, key, lambda r=row: main.state.rows.get(main.state.sample) != r
                    )
                )
                next_press = time.perf_counter() + every
        elapsed = time.perf_counter() - t0
        done = scored()
    return {
        "fill": fill,
        "samples": n,
        "scored": done,
        "fill_s": elapsed,
        "samples_per_s": (done - d0) / elapsed if elapsed > 0 else float("nan"),
        "latencies": lat,
    }


def report_fill(r: dict) -> None:
    lat = r["latencies"]
    load = os.getloadavg()
    if not r["fill"]:
        print(f"\nthe same presses with the fill off; load average {load[0]:.1f} {load[1]:.1f}")
    else:
        print(
            f"\nfill of {r['samples']} samples (2 wirings): {r['scored']} scored in "
            f"{r['fill_s']:.1f} s, {r['samples_per_s']:.2f} samples/s; "
            f"load average {load[0]:.1f} {load[1]:.1f}"
        )
    if not lat:
        print("  no key press landed during the fill")
        return
    ms = [x * 1000 for x in lat]
    ok = percentile(ms, 0.99) < 50 and max(ms) < 100
    print(
        f"  key press during the fill: p50 {statistics.median(ms):.1f} ms, "
        f"p99 {percentile(ms, 0.99):.1f} ms, max {max(ms):.1f} ms (n={len(ms)}; "
        f"target p99 < 50 ms, max < 100 ms: {'ok' if ok else 'MISSED'})"
    )


async def screenshot(inputs: Inputs, path: Path) -> None:
    """The README image: the demo at 120x40 as it opens, once the doctor's search has put the
    trained wiring beside the fed one and the fill has replayed every sample under both (the
    snapshot test `test_main_120x40` shows the same screen)."""
    from inspector.tui.app import InspectorApp

    app = InspectorApp(inputs)
    async with app.run_test(size=(120, 40)) as pilot:
        main = app.main
        while main.state.view is None or main.state.session.first_look is None:
            await pilot.pause(0.05)
        await wait_idle(pilot)
        while app.device is not None and app.device.fill_pending():
            await pilot.pause(0.05)
        await wait_idle(pilot)
        while main.batch_pending:
            await pilot.pause(0.05)
        app.clear_notifications()
        await pilot.pause(0.2)
        path.parent.mkdir(parents=True, exist_ok=True)
        app.save_screenshot(filename=path.name, path=str(path.parent))
    print(f"wrote {path}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--only", choices=["demo", "mid"], help="one data set only")
    p.add_argument("--samples", type=int, default=12, help="mid-size samples (default 12)")
    p.add_argument(
        "--seq-len", type=int, default=2048, help="mid-size sample length (default 2048)"
    )
    p.add_argument("--paint-repeats", type=int, default=5)
    p.add_argument("--moves", type=int, default=30)
    p.add_argument("--switches", type=int, default=3)
    p.add_argument("--screenshot", type=Path, metavar="SVG", help="only save the demo screenshot")
    p.add_argument(
        "--fill", type=int, metavar="N", help="only: key presses during the fill of N samples"
    )
    p.add_argument("--fill-seq-len", type=int, default=256, help="their length (default 256)")
    p.add_argument("--presses", type=int, default=100, help="key presses during the fill")
    p.add_argument("--press-every", type=float, default=0.25, help="seconds between presses")
    p.add_argument(
        "--fill-off", action="store_true", help="with --fill: the same presses, the fill off"
    )
    p.add_argument("--json", type=Path, help="with --fill: also write the figures here")
    args = p.parse_args()

    if args.fill:
        inputs = mid_inputs(args.fill, args.fill_seq_len)
        r = asyncio.run(
            fill_latency(inputs, args.fill, args.presses, args.press_every, fill=not args.fill_off)
        )
        report_fill(r)
        if args.json is not None:
            import json

            args.json.write_text(json.dumps({**r, "load": os.getloadavg()}))
        return 0

    if args.screenshot is not None:
        demo = demo_inputs()
        if demo is None:
            print("assets/demo not built", file=sys.stderr)
            return 1
        asyncio.run(screenshot(demo, args.screenshot))
        return 0

    cases: list[tuple[str, Inputs]] = []
    if args.only in (None, "demo"):
        demo = demo_inputs()
        if demo is None:
            print("assets/demo not built: skipping the demo case")
        else:
            cases.append(("demo", demo))
    if args.only in (None, "mid"):
        cases.append((f"mid {args.seq_len} tok", mid_inputs(args.samples, args.seq_len)))

    import torch

    print(
        f"python {sys.version.split()[0]}, torch {torch.__version__}, {os.cpu_count()} CPUs, "
        f"threads {torch.get_num_threads()}"
    )
    print(f"interpreter start (python -c pass): {interpreter_start(3) * 1000:.0f} ms")
    targets = {"first paint": 0.5, "position move": 0.030, "wiring toggle returning": 0.050}
    for name, inputs in cases:
        paint, torch_seen = first_paint(inputs, args.paint_repeats)
        lat = asyncio.run(key_latencies(inputs, args.moves, args.switches))
        print(f"\n{name}: medians")
        rows = [("first paint", paint, args.paint_repeats)] + [
            (k, statistics.median(v), len(v)) for k, v in lat.items() if v
        ]
        for label, value, count in rows:
            target = targets.get(label)
            mark = ""
            if target is not None:
                verdict = "ok" if value < target else "MISSED"
                mark = f" (target < {target * 1000:.0f} ms: {verdict})"
            print(f"  {label:<26} {value * 1000:8.1f} ms   n={count}{mark}")
        print(f"  torch imported before first paint: {torch_seen}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
