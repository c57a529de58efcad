"""The live loop's target side of a round: verifying the drafted tree against the target's
logits greedily, and keeping only the accepted path in its KV cache."""

from __future__ import annotations

import torch

from inspector.errors import InputError


def verify_tree(
    logits: torch.Tensor, tokens: list[int], parent: list[int]
) -> tuple[list[int], int]:
    """Greedy verification: (the accepted nodes, root to leaf; the bonus token) from the
    target's logits at the root and at each node ([M + 1, V], row 0 the root's), the nodes'
    target ids and parents (-1: the root). Children are tried in node order (SGLang's and the
    EAGLE reference's). At a temperature, `sampling.sample_verify` runs each engine's rule."""
    children: dict[int, list[int]] = {}
    for j, p in enumerate(parent):
        children.setdefault(p, []).append(j)
    cur, path = -1, []
    while True:
        best = int(logits[cur + 1].float().argmax())
        nxt = next((j for j in children.get(cur, []) if tokens[j] == best), None)
        if nxt is None:
            return path, best
        path.append(nxt)
        cur = nxt


def trim_cache(cache: object, keep: torch.Tensor) -> None:
    """Keep only the positions `keep` of the target's KV cache (the committed prefix, the root
    and the accepted path), in place: transformers' DynamicCache, either API."""
    layers = getattr(cache, "layers", None)
    if layers is not None:
        for layer in layers:
            if getattr(layer, "is_sliding", False):
                raise InputError(
                    None, "target", "sliding-window attention layers: the live loop needs full ones"
                )
            if getattr(layer, "keys", None) is None:
                continue
            idx = keep.to(layer.keys.device)
            layer.keys = layer.keys.index_select(-2, idx)
            layer.values = layer.values.index_select(-2, idx)
        return
    if hasattr(cache, "key_cache") and hasattr(cache, "value_cache"):  # transformers 4.x
        kc, vc = cache.key_cache, cache.value_cache
        for i in range(len(kc)):
            kc[i] = kc[i].index_select(-2, keep.to(kc[i].device))
            vc[i] = vc[i].index_select(-2, keep.to(vc[i].device))
        if hasattr(cache, "_seen_tokens"):
            cache._seen_tokens = int(keep.numel())
        return
    raise InputError(None, "target", f"unsupported KV cache type {type(cache).__name__}")
