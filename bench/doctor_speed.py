"""Speed of the doctor's wiring search against the naive way, in the same process.

    python bench/doctor_speed.py                 # the bundled demo + the mid-size random draft
    python bench/doctor_speed.py --skip-mid      # the demo only
    python bench/doctor_speed.py --no-prune      # what pruning contributes

Both searches rank every ordered choice of 3 slots out of 4 (24 wirings) on the same samples by
step-0 all-tok hits, ties broken by the true token's mean log-probability, and must agree on the
best wiring.
  naive: per wiring and sample, fc recomputed from the concatenated slots and a full forward with
    full-vocab logits on every row (`naive_search` in tests/doctor_oracle.py, the tests' oracle);
  ours: `inspector.doctor.search_wirings` as `diagnose` runs it: cached per-sample slot projections,
    wirings batched through the layer, lm_head on the scored rows only, and clearly worse
    wirings dropped after each sample (the configured / train / serve wirings always run to the
    end, since the report quotes their margins).
Each side gets a fresh Evaluator (cold caches); one warm-up forward runs first. On a CPU shared
with other busy processes, multi-threaded kernels stall on each other: compare with --threads 1.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from doctor_oracle import naive_search  # noqa: E402

from inspector.doctor import search_wirings  # noqa: E402
from inspector.doctor.wiring.named import named_wirings  # noqa: E402
from inspector.doctor.wiring.search import all_wirings  # noqa: E402
from inspector.evaluate import Evaluator, resolve_device  # noqa: E402
from inspector.formats import SampleSet, load_draft  # noqa: E402
from inspector.synthetic import SyntheticSpec, write_synthetic  # noqa: E402


def make_evaluator(draft_dir: Path, samples: Path, device: torch.device) -> Evaluator:
    return Evaluator(load_draft(draft_dir, device=device), SampleSet(samples))


def bench_case(
    name: str, draft_dir: Path, samples: Path, n: int, device: torch.device, prune: bool
) -> dict:
    ev = make_evaluator(draft_dir, samples, device)
    idx = list(range(min(n, len(ev.samples))))
    cands = all_wirings(len(ev.slot_info), ev.n_blocks)
    # Warm-up: one forward each way on the first sample, then fresh evaluators.
    naive_search(ev, idx[:1], cands[:1])
    search_wirings(ev, idx[:1], protected=[cands[0]], prune=False)

    ev_fast = make_evaluator(draft_dir, samples, device)
    named = named_wirings(ev_fast, ev_fast.slot_info)
    t0 = time.perf_counter()
    ws = search_wirings(ev_fast, idx, protected=named.protected, prune=prune)
    fast_s = time.perf_counter() - t0
    ranked = ws.ranked()

    ev_naive = make_evaluator(draft_dir, samples, device)
    t0 = time.perf_counter()
    naive = naive_search(ev_naive, idx, cands)
    naive_s = time.perf_counter() - t0

    fast_best, naive_best = ranked[0], naive[0]
    same = fast_best.wiring == naive_best[0]
    tokens = sum(ev.samples[i].length for i in idx)
    print(
        f"\n{name}: {len(cands)} wirings x {len(idx)} samples ({tokens} tokens), {device}, {ev.draft.dtype}"
    )
    print(
        f"  naive  {naive_s:8.2f} s  ({len(cands) * len(idx)} forwards)  best {list(naive_best[0])} {naive_best[1].fmt()}"
    )
    print(
        f"  ours   {fast_s:8.2f} s  ({ws.forwards} wiring-sample passes, "
        f"{sum(a.dropped for a in ranked)} wirings dropped early)  best {list(fast_best.wiring)} {fast_best.counts().fmt()}"
    )
    print(f"  ratio  {naive_s / fast_s:8.2f}x   same best wiring: {same}")
    return {
        "name": name,
        "naive_s": naive_s,
        "fast_s": fast_s,
        "ratio": naive_s / fast_s,
        "same_best": same,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--demo", metavar="DIR", help="demo folder (default: the bundled demo)")
    ap.add_argument("--samples", type=int, default=8, help="samples per case (default 8)")
    ap.add_argument("--skip-mid", action="store_true", help="skip the mid-size random draft")
    ap.add_argument("--skip-demo", action="store_true", help="skip the demo")
    ap.add_argument("--no-prune", action="store_true", help="evaluate every wiring on every sample")
    ap.add_argument("--device", default="cpu")
    ap.add_argument(
        "--seq-len", type=int, default=1024, help="mid-size sample length (default 1024)"
    )
    ap.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    args = ap.parse_args(argv)
    device = resolve_device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads")
    torch.manual_seed(0)
    results = []
    if not args.skip_demo:
        from inspector.demo_paths import DemoPaths, demo_paths

        demo = DemoPaths(Path(args.demo)) if args.demo else demo_paths()
        r = bench_case(
            "demo", demo.draft, demo.train_samples, args.samples, device, not args.no_prune
        )
        print(f"  demo search under 10 s: {r['fast_s'] < 10.0}")
        results.append(r)
    if not args.skip_mid:
        with tempfile.TemporaryDirectory() as tmp:
            d, s = write_synthetic(
                Path(tmp), SyntheticSpec(size="mid", n_samples=args.samples, seq_len=args.seq_len)
            )
            results.append(
                bench_case("mid-size random draft", d, s, args.samples, device, not args.no_prune)
            )
    ok = all(r["same_best"] for r in results)
    print(
        "\nsummary: "
        + ", ".join(f"{r['name']} {r['ratio']:.2f}x" for r in results)
        + ("" if ok else "  BEST WIRINGS DIFFER")
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
