"""Throughput of `eagle-inspect eval` against a plain reference forward and the machine's matmul.

    python bench/eval_throughput.py                         # mid-size draft, CPU, float32
    python bench/eval_throughput.py --device cuda --size large   # the real case's shape, bf16

Prints tokens/s of our eval path (Evaluator.run over the two default wirings, fresh caches each
repeat) and two ratios measured in the same process:
  (a) ours / a naive reference forward written plainly below (per sample, fc recomputed per wiring);
  (b) achieved model FLOP/s / torch.mm FLOP/s on this device and dtype (the physical limit).
Medians of --repeats runs.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from inspector.evaluate import Evaluator  # noqa: E402
from inspector.formats import SampleSet, load_draft  # noqa: E402
from inspector.synthetic import SIZES, SyntheticSpec, write_synthetic  # noqa: E402


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_flops(device: torch.device, dtype: torch.dtype, n: int = 2048, reps: int = 10) -> float:
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    a @ b
    sync(device)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        a @ b
        sync(device)
        times.append(time.perf_counter() - t0)
    return 2 * n**3 / statistics.median(times)


def model_flops_per_token(size: str, t: int) -> float:
    """Matmul FLOPs of one forward per token and wiring: fc, q/k/v/o, attention, MLP, lm_head."""
    h, nh, nkv, hd, inter, _v, d = SIZES[size]
    fc = 2 * h * 3 * h
    qkvo = 2 * (2 * h) * (nh + 2 * nkv) * hd + 2 * nh * hd * h
    attn = 2 * 2 * nh * hd * t / 2  # q.k and p.v over half the keys on average (causal)
    mlp = 2 * 3 * h * inter
    head = 2 * h * d
    return fc + qkvo + attn + mlp + head


def naive_forward(
    w: dict, cfg, slots: list[torch.Tensor], ids: torch.Tensor, wiring
) -> torch.Tensor:
    """A plain EAGLE-3 step-0 forward in float32: what someone would write without our caches."""
    eps = cfg.rms_norm_eps

    def norm(x, weight):
        return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    t = ids.numel() - 1
    g = torch.cat([slots[i][:t] for i in wiring], -1)
    h = g @ w["fc.weight"].T
    e = w["embed_tokens.weight"][ids[1:]]
    p = "layers.0."
    a = torch.cat(
        [norm(e, w[p + "input_layernorm.weight"]), norm(h, w[p + "hidden_norm.weight"])], -1
    )
    nh, nkv, hd = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    q = (a @ w[p + "self_attn.q_proj.weight"].T).view(t, nh, hd).transpose(0, 1)
    k = (a @ w[p + "self_attn.k_proj.weight"].T).view(t, nkv, hd).transpose(0, 1)
    v = (a @ w[p + "self_attn.v_proj.weight"].T).view(t, nkv, hd).transpose(0, 1)
    inv = 1.0 / (cfg.rope.theta ** (torch.arange(0, hd, 2, device=h.device).float() / hd))
    ang = torch.arange(1, t + 1, device=h.device).float()[:, None] * inv
    cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()

    def rope(x):
        x1, x2 = x[..., : hd // 2], x[..., hd // 2 :]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    q, k = rope(q), rope(k)
    k = k.repeat_interleave(nh // nkv, 0)
    v = v.repeat_interleave(nh // nkv, 0)
    o = F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True)[0]
    o = o.transpose(0, 1).reshape(t, nh * hd) @ w[p + "self_attn.o_proj.weight"].T
    u = h + o
    x = norm(u, w[p + "post_attention_layernorm.weight"])
    z = (
        u
        + (F.silu(x @ w[p + "mlp.gate_proj.weight"].T) * (x @ w[p + "mlp.up_proj.weight"].T))
        @ w[p + "mlp.down_proj.weight"].T
    )
    logits = norm(z, w["norm.weight"]) @ w["lm_head.weight"].T
    return logits.softmax(-1).argmax(-1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="mid", choices=["mid", "large"])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--samples", type=int, default=None)
    ap.add_argument("--seq-len", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    device = torch.device(args.device)
    large = args.size == "large"
    dtype = torch.bfloat16 if large else torch.float32
    n_samples = args.samples or (4 if large else 8)
    seq_len = args.seq_len or (2048 if large else 1024)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        ckpt, samples_dir = write_synthetic(
            Path(tmp),
            SyntheticSpec(size=args.size, n_samples=n_samples, seq_len=seq_len, dtype=dtype),
        )
        print(
            f"built {args.size} draft + {n_samples} x {seq_len} tokens in {time.perf_counter() - t0:.1f}s",
            file=sys.stderr,
        )
        draft = load_draft(ckpt, device=device)
        samples = SampleSet(samples_dir)
        for i in range(n_samples):  # disk reads are not what we measure
            samples[i]
        tokens = 2 * sum(s.length - 2 for s in samples)  # positions evaluated, both wirings

        def ours() -> float:
            ev = Evaluator(draft, samples)
            ws = [ev.wiring("train"), ev.wiring("serve")]
            sync(device)
            t = time.perf_counter()
            ev.run(ws)
            sync(device)
            return time.perf_counter() - t

        w = draft.to(dtype=torch.float32).weights if not large else draft.weights
        cfg = draft.config

        def naive() -> float:
            sync(device)
            t = time.perf_counter()
            with torch.inference_mode():
                for s in samples:
                    slots = [x.to(device, w["fc.weight"].dtype) for x in s.slots]
                    ids = s.input_ids.to(device)
                    for wiring in ((0, 1, 2), (1, 2, 3)):
                        naive_forward(w, cfg, slots, ids, wiring)
            sync(device)
            return time.perf_counter() - t

        ours()  # warm-up (allocator, kernels)
        naive()
        t_ours = statistics.median(ours() for _ in range(args.repeats))
        t_naive = statistics.median(naive() for _ in range(args.repeats))
        peak = matmul_flops(device, dtype)
        flops = model_flops_per_token(args.size, seq_len) * tokens
    print(
        f"device {device}, dtype {str(dtype).replace('torch.', '')}, torch threads {torch.get_num_threads()}"
    )
    print(f"ours : {tokens / t_ours:10.0f} tokens/s  ({t_ours:.2f}s median of {args.repeats})")
    print(f"naive: {tokens / t_naive:10.0f} tokens/s  ({t_naive:.2f}s)")
    print(f"ratio ours/naive: {t_naive / t_ours:.2f}x")
    print(
        f"achieved {flops / t_ours / 1e9:.1f} GFLOP/s vs torch.mm {peak / 1e9:.1f} GFLOP/s: "
        f"{flops / t_ours / peak:.2f} of the matmul limit"
    )
    if not math.isfinite(t_ours):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
