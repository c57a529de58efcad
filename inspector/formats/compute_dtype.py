"""The dtype a draft is computed in: what the user asked for, else the stored one, except on a CPU.

Real drafts are stored in bfloat16 (some in float16). A GPU computes in them at full speed; a CPU
does not: PyTorch's CPU matmuls in bfloat16 ran at x0.18 of float32's speed and float16 at x0.49
(`bench/dtype_speed.py`, a 1024-wide draft), so a 4096-wide draft's eval took minutes and a
real config's hours. `--dtype auto` on a CPU therefore upcasts half-precision weights to float32
once, at load, when the float32 copy fits in the RAM the machine has free, and says so. Asked
for by name (`--dtype bfloat16`), the stored dtype is kept anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from inspector.errors import InputError, setting_field

DTYPES = {  # --dtype names
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}
HALF = (torch.bfloat16, torch.float16)
# The float32 copy and the stored weights it is cast from (both alive while it is made) may take
# at most this share of the RAM available at load. The samples' and caches' budget is a share of
# the same RAM taken before the load (a quarter by default, inspector.memory), so the two fit.
UPCAST_SHARE = 0.5


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


@dataclass(frozen=True)
class ComputeDtype:
    """The dtype chosen, the stored one, and the sentence that explains a difference (or None)."""

    dtype: torch.dtype
    stored: torch.dtype
    note: str | None = None


def compute_dtype(
    requested: str | torch.dtype | None,
    stored: torch.dtype,
    *,
    device: str | torch.device,
    float_bytes: int,
    available: int,
) -> ComputeDtype:
    """`requested` None / "auto": the stored dtype, or float32 on a CPU for a half-precision draft
    whose floating weights (`float_bytes` as stored) and their float32 copy fit together in
    UPCAST_SHARE of `available` bytes of RAM."""
    if isinstance(requested, torch.dtype):
        return ComputeDtype(requested, stored)
    if requested not in (None, "auto"):
        if requested not in DTYPES:
            raise InputError(
                None,
                setting_field("dtype"),
                f"unknown dtype {requested!r} (auto, float32, bfloat16, float16)",
            )
        return ComputeDtype(DTYPES[requested], stored)
    on_cpu = torch.device(device).type == "cpu"
    if not on_cpu or stored not in HALF:
        return ComputeDtype(stored, stored)
    upcast = float_bytes * 4 // stored.itemsize
    name = dtype_name(stored)
    if upcast + float_bytes > UPCAST_SHARE * available:
        return ComputeDtype(
            stored,
            stored,
            f"computing in {name}, as stored: its float32 copy ({upcast / 2**30:.1f} GiB) and the "
            f"stored weights would take over half of the RAM available ({available / 2**30:.1f} GiB); a CPU runs "
            f"{name} several times slower",
        )
    return ComputeDtype(
        torch.float32,
        stored,
        f"computing in float32 on the CPU (stored {name}, which a CPU runs several times "
        f"slower); --dtype {name} keeps the stored dtype",
    )
