"""A draft layer's tensors, typed and resolved once: which optional parts a family has (q/k/v and
o_proj biases, Qwen3's per-head q/k norms, MLA's low-rank projections, layer 0's hidden_norm) is
settled here, so the layer code reads fields instead of probing tensor names."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from inspector.draft import Draft


@dataclass(frozen=True)
class LlamaAttention:
    """q/k/v/o projections [out, in]; biases (Qwen2-style) and per-head q/k norms (Qwen3) when the
    checkpoint has them."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    o: torch.Tensor
    q_bias: torch.Tensor | None = None
    k_bias: torch.Tensor | None = None
    v_bias: torch.Tensor | None = None
    o_bias: torch.Tensor | None = None
    q_norm: torch.Tensor | None = None
    k_norm: torch.Tensor | None = None


@dataclass(frozen=True)
class MlaAttention:
    """Multi-head latent attention: q through q_proj, or the low-rank q_a -> norm -> q_b; kv_a
    gives the compressed kv (normed, then kv_b) and the shared rope key."""

    q: torch.Tensor | None  # q_proj, when q_lora_rank is None
    q_a: torch.Tensor | None
    q_a_norm: torch.Tensor | None
    q_b: torch.Tensor | None
    kv_a: torch.Tensor
    kv_a_norm: torch.Tensor
    kv_b: torch.Tensor
    o: torch.Tensor
    o_bias: torch.Tensor | None = None


@dataclass(frozen=True)
class LayerWeights:
    """One decoder layer. hidden_norm: layer 0's norm of the fc output (EAGLE-3's first layer
    concatenates the normed embedding and the normed fc output); None in later layers.
    input_proj: SpecForge PR 186's MLA layer 0 projects that concat to H before attention."""

    index: int
    input_norm: torch.Tensor
    post_norm: torch.Tensor
    attn: LlamaAttention | MlaAttention
    gate: torch.Tensor
    up: torch.Tensor
    down: torch.Tensor
    hidden_norm: torch.Tensor | None = None
    # SpecForge PR 186's MLA layer 0: an RMSNorm over the 2H concat [2H], then proj [H, 2H].
    input_proj_norm: torch.Tensor | None = None
    input_proj: torch.Tensor | None = None


def resolve_layer(draft: Draft, idx: int) -> LayerWeights:
    """Layer `idx`'s tensors from the canonical names (the loader has checked the required ones)."""
    w = draft.weights
    p = f"layers.{idx}."
    a = p + "self_attn."
    attn: LlamaAttention | MlaAttention
    mla = draft.config.mla
    input_proj = idx == 0 and mla is not None and mla.input_proj
    if mla is not None:
        attn = MlaAttention(
            q=w.get(a + "q_proj.weight"),
            q_a=w.get(a + "q_a_proj.weight"),
            q_a_norm=w.get(a + "q_a_layernorm.weight"),
            q_b=w.get(a + "q_b_proj.weight"),
            kv_a=w[a + "kv_a_proj_with_mqa.weight"],
            kv_a_norm=w[a + "kv_a_layernorm.weight"],
            kv_b=w[a + "kv_b_proj.weight"],
            o=w[a + "o_proj.weight"],
            o_bias=w.get(a + "o_proj.bias"),
        )
    else:
        attn = LlamaAttention(
            q=w[a + "q_proj.weight"],
            k=w[a + "k_proj.weight"],
            v=w[a + "v_proj.weight"],
            o=w[a + "o_proj.weight"],
            q_bias=w.get(a + "q_proj.bias"),
            k_bias=w.get(a + "k_proj.bias"),
            v_bias=w.get(a + "v_proj.bias"),
            o_bias=w.get(a + "o_proj.bias"),
            q_norm=w.get(a + "q_norm.weight"),
            k_norm=w.get(a + "k_norm.weight"),
        )
    return LayerWeights(
        index=idx,
        input_norm=w[p + "input_layernorm.weight"],
        post_norm=w[p + "post_attention_layernorm.weight"],
        attn=attn,
        gate=w[p + "mlp.gate_proj.weight"],
        up=w[p + "mlp.up_proj.weight"],
        down=w[p + "mlp.down_proj.weight"],
        # a block draft norms fc's output once (`hidden_norm.weight`), not in layer 0
        hidden_norm=w[p + "hidden_norm.weight"]
        if idx == 0 and draft.config.block is None
        else None,
        input_proj_norm=w[p + "input_proj.input_norm.weight"] if input_proj else None,
        input_proj=w[p + "input_proj.proj.weight"] if input_proj else None,
    )


def resolve_layers(draft: Draft) -> tuple[LayerWeights, ...]:
    """Every decoder layer's tensors, in order. Cheap (name lookups, no copies): each forward entry
    resolves them once, so a weight replaced in the dict (a borrowed head, a trained copy) is read."""
    return tuple(resolve_layer(draft, i) for i in range(draft.config.num_layers))
