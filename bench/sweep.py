"""What `eagle-inspect sweep` costs against one replay: N checkpoints over the same samples.

    python bench/sweep.py                     # the demo draft, 4 checkpoints, its held samples
    python bench/sweep.py --checkpoints 8 --repeats 3

The run is N copies of the demo draft (its fc noised a little, so each is its own checkpoint).
Reference: `accept` alone on the first checkpoint, in this process (load, evaluate, replay).
Prints the medians over --repeats, and sweep / (N x reference): about 1 when a sweep costs N
replays (the samples read once and shared; the first checkpoint pays the reading).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from inspector.engines import Engine  # noqa: E402
from inspector.formats.run_dir import find_checkpoints  # noqa: E402
from inspector.serving.checkpoint_sweep import SweepSettings, sweep_run  # noqa: E402
from inspector.serving.spec import DraftSpec  # noqa: E402


def make_run(src: Path, out: Path, n: int) -> None:
    w = load_file(str(src / "model.safetensors"))
    for i in range(n):
        d = out / f"epoch_{i}_step_{(i + 1) * 100}"
        d.mkdir(parents=True)
        shutil.copy(src / "config.json", d / "config.json")
        g = torch.Generator().manual_seed(i)
        fc = w["fc.weight"]
        save_file(
            {**w, "fc.weight": fc + 0.05 * fc.std() * torch.randn(fc.shape, generator=g)},
            str(d / "model.safetensors"),
        )


def one_accept(ckpt: Path, samples: Path, spec: DraftSpec) -> float:
    from inspector.serving.replay import Replayer
    from inspector.session import Inputs, load_evaluator

    t0 = time.perf_counter()
    ev = load_evaluator(Inputs(ckpt, [str(samples)]), device="cpu", ttt_steps=spec.steps)
    Replayer(ev, spec, Engine.VLLM).run([ev.wiring("train")])
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoints", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    demo = ROOT / "assets" / "demo"
    samples = demo / "samples" / "held"
    spec = DraftSpec(3)
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        make_run(demo / "draft", run, a.checkpoints)
        ckpts = find_checkpoints(run).checkpoints
        refs, sweeps = [], []
        for _ in range(a.repeats):
            refs.append(one_accept(ckpts[0].path, samples, spec))
            t0 = time.perf_counter()
            sweep_run(ckpts, [str(samples)], SweepSettings(spec, Engine.VLLM, device="cpu"))
            sweeps.append(time.perf_counter() - t0)
    ref, sw = statistics.median(refs), statistics.median(sweeps)
    n = a.checkpoints
    print(f"one accept (reference): median {ref:.2f} s over {a.repeats}: {refs}")
    print(f"sweep of {n}: median {sw:.2f} s: {sweeps}")
    print(f"sweep / ({n} x reference) = {sw / (n * ref):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
