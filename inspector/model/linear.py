"""The one way the forward multiplies by a weight: `x @ W.T` on a row-major W [out, in]."""

from __future__ import annotations

import torch

# float32 bytes of one slice of a float16 weight upcast on CPU (the upcast copy stays bounded
# whatever the weight: a verifier lm_head can hold 10^9 values).
UPCAST_BYTES = 64 * 2**20


def linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x @ w.T, with w row-major [out, in] (the loader keeps every weight so).

    That layout is the fast one on CPU in every dtype (a pre-transposed contiguous copy hits a
    kernel 20-80x slower in bfloat16/float16). CPU float16 GEMMs are slow whatever the layout
    (several times float32 here): there the product runs in float32, from the float16 inputs,
    over slices of at most UPCAST_BYTES of the weight, and is rounded to float16 once.
    """
    if x.dtype != torch.float16 or x.device.type != "cpu":
        return x @ w.T
    xf = x.float()
    rows = max(1, UPCAST_BYTES // (4 * max(1, w.shape[1])))
    parts = [xf @ w[a : a + rows].float().T for a in range(0, w.shape[0], rows)]
    out = parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)
    return out.to(torch.float16)
