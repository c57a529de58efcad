"""Throughput of `eagle-inspect capture` against the target's plain forward, in the same process.

    python bench/capture_speed.py                    # the demo target and a mid-size random Llama
    python bench/capture_speed.py --only mid --device cuda --samples 16 --seq-len 2048

Prints tokens/s of the capture loop (forward with hidden states through the final-norm hook, slots
copied to the CPU in bfloat16 and written as data_{i}.pt; model loading excluded) and of the plain
forward (``model(input_ids)`` with logits, nothing kept) over the same samples, and their ratio.
Medians of --repeats runs; each capture run writes into a fresh folder.
The mid case is a random LlamaForCausalLM (H 1024, 8 layers, 16 heads / 4 kv heads, vocab 32000).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from inspector.capture.run import CaptureSettings, capture, prepare  # noqa: E402
from inspector.capture.transformers_target import TargetModel  # noqa: E402


def mid_target(root: Path) -> Path:
    """A random mid-size Llama saved once under ``root`` (float32)."""
    folder = root / "mid-llama"
    if (folder / "config.json").is_file():
        return folder
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=4,
        head_dim=64,
        max_position_embeddings=4096,
    )
    LlamaForCausalLM(cfg).save_pretrained(str(folder))
    return folder


def write_input(path: Path, vocab: int, n: int, seq_len: int) -> None:
    g = torch.Generator().manual_seed(1)
    with open(path, "w") as f:
        for _ in range(n):
            ids = torch.randint(0, vocab, (seq_len,), generator=g).tolist()
            f.write(json.dumps({"input_ids": ids}) + "\n")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bench_case(name: str, target: Path, args: argparse.Namespace, work: Path) -> dict:
    from inspector.capture.transformers_target import read_target_info

    info = read_target_info(target)
    seq_len = min(args.seq_len, info.max_positions or args.seq_len)
    inp = work / f"{name}.jsonl"
    write_input(inp, info.vocab_size, args.samples, seq_len)
    settings = CaptureSettings(device=args.device, dtype=args.dtype, max_length=seq_len)
    prepared = prepare(target, inp, settings)
    tokens = sum(len(r.ids) for r in prepared.records)

    model = TargetModel(target, dtype=args.dtype, device=args.device)
    ids = [r.ids for r in prepared.records]
    model.logits_forward(ids[0])  # warm-up
    plain = []
    for _ in range(args.repeats):
        sync(model.input_device)
        t0 = time.perf_counter()
        for x in ids:
            model.logits_forward(x)
        sync(model.input_device)
        plain.append(tokens / (time.perf_counter() - t0))
    del model

    caught = []
    for r in range(args.repeats + 1):  # the first run warms up
        res = capture(target, inp, work / f"{name}-out-{r}", settings, prepared=prepared)
        if r:
            caught.append(res.tokens / res.seconds)
    out = {
        "case": name,
        "layers": info.num_layers,
        "slots": list(prepared.plan.slots),
        "samples": args.samples,
        "seq_len": seq_len,
        "capture_tokens_per_s": statistics.median(caught),
        "plain_forward_tokens_per_s": statistics.median(plain),
    }
    out["ratio"] = out["capture_tokens_per_s"] / out["plain_forward_tokens_per_s"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--only", choices=("demo", "mid"))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    cases = []
    demo = ROOT / "assets" / "demo" / "target"
    if args.only in (None, "demo") and (demo / "config.json").is_file():
        cases.append(("demo", demo))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.only in (None, "mid"):
            cases.append(("mid", mid_target(Path(tempfile.gettempdir()) / "eagle-inspect-bench")))
        for name, target in cases:
            r = bench_case(name, target, args, work)
            print(
                f"{r['case']:5s} L={r['layers']} slots {r['slots']} {r['samples']} x {r['seq_len']} "
                f"tokens: capture {r['capture_tokens_per_s']:,.0f} tokens/s, plain forward "
                f"{r['plain_forward_tokens_per_s']:,.0f} tokens/s, ratio {r['ratio']:.2f}"
            )


if __name__ == "__main__":
    main()
