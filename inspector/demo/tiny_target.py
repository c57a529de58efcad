"""The demo's target: a small Llama-style decoder in plain torch, its training loop, and capture.

It follows HF ``LlamaForCausalLM`` math (RMSNorm, rotate_half RoPE with theta 10000, GQA where query
head h reads kv head h // (heads / kv_heads), SiLU-gated MLP, untied ``lm_head``) so that its saved
``model.embed_tokens.weight`` / ``model.norm.weight`` / ``lm_head.weight`` mean exactly what they mean
in a real Llama checkpoint.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn


@dataclass(frozen=True)
class TargetConfig:
    vocab_size: int = 512
    hidden_size: int = 128
    num_hidden_layers: int = 6
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 32
    intermediate_size: int = 384
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_position_embeddings: int = 512

    def hf_config(self, eos_token_id: int = 0) -> dict:
        """The HF ``LlamaConfig``-style dict written to ``target/config.json``."""
        d = asdict(self)
        d.update(
            model_type="llama",
            architectures=["LlamaForCausalLM"],
            hidden_act="silu",
            attention_bias=False,
            mlp_bias=False,
            tie_word_embeddings=False,
            bos_token_id=eos_token_id,
            eos_token_id=eos_token_id,
            rope_parameters={"rope_type": "default", "rope_theta": self.rope_theta},
            dtype="float32",
        )
        return d


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        xf = x.float()
        return self.weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(
            x.dtype
        )


def rope_tables(head_dim: int, theta: float, positions: Tensor) -> tuple[Tensor, Tensor]:
    """cos/sin [T, head_dim] in the HF rotate_half layout (channel i pairs with i + head_dim/2)."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    freqs = positions.float()[:, None] * inv_freq[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


def _rotate_half(x: Tensor) -> Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    return x * cos + _rotate_half(x) * sin


class Attention(nn.Module):
    def __init__(self, c: TargetConfig) -> None:
        super().__init__()
        self.nh, self.nkv, self.hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.q_proj = nn.Linear(c.hidden_size, self.nh * self.hd, bias=False)
        self.k_proj = nn.Linear(c.hidden_size, self.nkv * self.hd, bias=False)
        self.v_proj = nn.Linear(c.hidden_size, self.nkv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.nh * self.hd, c.hidden_size, bias=False)

    def forward(
        self, x: Tensor, cos: Tensor, sin: Tensor, cache: list[Tensor] | None = None
    ) -> Tensor:
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.nh, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.nkv, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.nkv, self.hd).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is not None:
            # Incremental decoding: append this chunk's keys/values to the cache.
            if cache:
                k = torch.cat([cache[0], k], dim=2)
                v = torch.cat([cache[1], v], dim=2)
            cache[:] = [k, v]
        # GQA: query head h reads kv head h // (nh / nkv) (HF repeat_kv order).
        rep = self.nh // self.nkv
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        # With a cache only the newest T queries exist; they may see every cached key before them.
        causal = T > 1
        if causal and k.shape[2] != T:
            raise ValueError("multi-token chunks after a filled cache are not supported")
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return self.o_proj(o.transpose(1, 2).reshape(B, T, self.nh * self.hd))


class MLP(nn.Module):
    def __init__(self, c: TargetConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, c: TargetConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mlp = MLP(c)

    def forward(
        self, x: Tensor, cos: Tensor, sin: Tensor, cache: list[Tensor] | None = None
    ) -> Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, cache)
        return x + self.mlp(self.post_attention_layernorm(x))


class Target(nn.Module):
    """Llama-style causal LM. Parameter names mirror HF (``embed_tokens``, ``layers.i.*``, ``norm``,
    ``lm_head``) so the exported keys can be prefixed with ``model.`` like a real checkpoint."""

    def __init__(self, c: TargetConfig) -> None:
        super().__init__()
        self.config = c
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(c) for _ in range(c.num_hidden_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        # HF Llama initialisation: normal(0, 0.02) everywhere, norms at one.
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)

    def forward(
        self,
        ids: Tensor,
        hidden_states: list[Tensor] | None = None,
        caches: list[list[Tensor]] | None = None,
        start_pos: int = 0,
    ) -> Tensor:
        """Logits [B, T, V]. If ``hidden_states`` is a list it receives the HF ``output_hidden_states``
        entries 0..L, except that entry L is the last layer's output *before* the final norm (the
        state speculators v1 saves; HF's own last entry is post-norm)."""
        T = ids.shape[1]
        cos, sin = rope_tables(
            self.config.head_dim, self.config.rope_theta, torch.arange(start_pos, start_pos + T)
        )
        x = self.embed_tokens(ids)
        if hidden_states is not None:
            hidden_states.append(x)
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, None if caches is None else caches[i])
            if hidden_states is not None:
                hidden_states.append(x)
        return self.lm_head(self.norm(x))

    def hf_state_dict(self) -> dict[str, Tensor]:
        """Every weight under its ``LlamaForCausalLM`` name (``model.`` prefix, ``lm_head`` bare)."""
        return {
            (k if k.startswith("lm_head.") else f"model.{k}"): v.detach().contiguous()
            for k, v in self.state_dict().items()
        }


def lr_at(frac: float, peak: float, warmup: float = 0.05, floor: float = 0.1) -> float:
    """Linear warmup over the first ``warmup`` of training, then cosine decay to ``floor`` * peak."""
    if frac < warmup:
        return peak * max(frac, 1e-3) / warmup
    p = min(1.0, (frac - warmup) / (1 - warmup))
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * p)))


TIME_MARGIN = 0.02


def progress_fraction(step: int, steps: int, elapsed: float, budget_s: float | None) -> float:
    """How far training is, in [0, 1]: by steps, or by time when the time budget runs out first.

    On a machine as fast as the one the plan was sized on, the step count always leads and the run is
    exactly reproducible. On a slower (or busy) machine the clock leads: the schedule is compressed
    so training still anneals and ends on time, instead of overrunning or stopping at a high lr.
    """
    frac = step / steps
    if budget_s is not None:
        # The margin keeps the clock out of the schedule unless the machine is clearly slower
        # than planned, so normal timing jitter never changes the result.
        frac = max(frac, elapsed / budget_s - TIME_MARGIN)
    return min(frac, 1.0)


def train_target(
    stream: Tensor,
    config: TargetConfig,
    *,
    steps: int,
    batch: int,
    seq_len: int,
    seed: int,
    lr: float = 3e-3,
    time_budget_s: float | None = None,
    progress: Callable[[str], None] = lambda s: None,
    init: Target | None = None,
) -> tuple[Target, dict]:
    """Train on random windows of the token ``stream`` (documents joined by EOS).

    ``time_budget_s`` bounds the wall time on slow machines (see :func:`progress_fraction`).
    ``init``: a model of ``config`` to train further (default: a fresh one, HF-initialised).
    Returns the model and a stats dict.
    """
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = init if init is not None else Target(config)
    model.train()
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=lr,
        betas=(0.9, 0.95),
    )
    t0 = time.perf_counter()
    losses: list[float] = []
    done = 0
    compressed = False
    while True:
        elapsed = time.perf_counter() - t0
        frac = progress_fraction(done, steps, elapsed, time_budget_s)
        if frac >= 1.0:
            break
        compressed = compressed or frac > done / steps
        starts = torch.randint(0, stream.numel() - seq_len - 1, (batch,), generator=g)
        win = torch.stack([stream[s : s + seq_len + 1] for s in starts.tolist()])
        for group in opt.param_groups:
            group["lr"] = lr_at(frac, lr)
        logits = model(win[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, config.vocab_size), win[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        done += 1
        if done % 50 == 0 or done == steps:
            avg = sum(losses[-50:]) / len(losses[-50:])
            progress(f"target step {done}/{steps} loss {avg:.3f} ({time.perf_counter() - t0:.0f}s)")
    if compressed:
        progress(f"target: time budget led the schedule; stopped after {done} of {steps} steps")
    model.eval()
    return model, {
        "steps": done,
        "tokens": done * batch * seq_len,
        "final_loss": sum(losses[-50:]) / max(1, len(losses[-50:])),
        "seconds": time.perf_counter() - t0,
        "schedule_compressed_by_time": compressed,
    }


@torch.no_grad()
def top1_accuracy(
    model: Target, docs: list[list[int]], seq_len: int, max_windows: int = 256
) -> dict:
    """Next-token top-1 accuracy on non-overlapping windows of held-out documents; also the
    accuracy of always guessing the most common token, as the "chance" baseline."""
    windows = []
    for ids in docs:
        for s in range(0, len(ids) - seq_len, seq_len):
            windows.append(ids[s : s + seq_len + 1])
            if len(windows) >= max_windows:
                break
        if len(windows) >= max_windows:
            break
    if not windows:
        raise ValueError("no held-out document is long enough to evaluate the target")
    w = torch.tensor(windows)
    hits = total = 0
    for i in range(0, len(w), 32):
        b = w[i : i + 32]
        pred = model(b[:, :-1]).argmax(-1)
        hits += (pred == b[:, 1:]).sum().item()
        total += b[:, 1:].numel()
    labels = w[:, 1:].reshape(-1)
    common = torch.bincount(labels).max().item()
    return {"top1": hits / total, "most_common_baseline": common / total, "eval_tokens": total}
