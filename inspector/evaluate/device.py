"""Which device to run on, what an out-of-memory error looks like on it, and the one retry in
smaller chunks that follows one."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch

from inspector.errors import InputError, setting_field
from inspector.model.attention import Chunking

T = TypeVar("T")


def resolve_device(name: str | None) -> torch.device:
    """auto -> the first CUDA device when there is one, else CPU."""
    if name in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except (RuntimeError, ValueError):
        raise InputError(
            None, setting_field("device"), f"{name!r}: expected auto, cpu, cuda or cuda:N"
        ) from None
    if dev.type not in ("cpu", "cuda"):
        raise InputError(
            None, setting_field("device"), f"{name!r}: expected auto, cpu, cuda or cuda:N"
        )
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise InputError(
                None, setting_field("device"), f"{name} requested but CUDA is not available"
            )
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise InputError(
                None,
                setting_field("device"),
                f"{name}: only {torch.cuda.device_count()} CUDA device(s)",
            )
    return dev


def is_oom(e: BaseException) -> bool:
    """A device (or host) allocation failure, whatever torch version raised it."""
    if isinstance(e, MemoryError):
        return True
    oom_type = getattr(torch.cuda, "OutOfMemoryError", None)
    if oom_type is not None and isinstance(e, oom_type):
        return True
    text = str(e).lower()
    return isinstance(e, RuntimeError) and ("out of memory" in text or "failed to allocate" in text)


OOM_RETRIES = (2, 4, 8, 16)  # chunk divisors tried after an out-of-memory error


def retry_oom(
    run: Callable[[Chunking], T],
    chunking: Chunking,
    device: torch.device,
    *,
    free: Callable[[], None] | None = None,
) -> T:
    """`run(chunking)`, retried in chunks 2, 4, 8 and 16 times smaller after an out-of-memory
    error (`free` first drops what the caller can spare, then the allocator's cache goes back);
    any other error, or one at the smallest chunks, is raised."""
    for divisor in (1, *OOM_RETRIES[:-1]):
        try:
            return run(chunking.smaller(divisor))
        except Exception as e:
            if not is_oom(e):
                raise
            if free is not None:
                free()
            release_cached(device)
    return run(chunking.smaller(OOM_RETRIES[-1]))


def release_cached(device: torch.device) -> None:
    """Hand the allocator's cached blocks back after an out-of-memory error."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
