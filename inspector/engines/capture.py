"""What an engine release captures from the target for a draft, given where its config holds the
ids: the HF indices (ascending: the fc input in block order), the notes, and a fatal config.

Each engine's module defines its `CaptureRelease` rows (a key per release line that captures
differently, e.g. vLLM before the capture that reads HF 0 and HF L); `capture.conventions` and
the doctor's default-feed check reach them through the registry. Pure: no torch, no files.

The id conventions are where the draft's config held its ids (`DraftConfig.aux_layer_convention`):
the top level (HF indices), eagle_config (a decoder layer's output: HF index = id + 1 for most
trainers), or a GGUF's baked `eagle3.target_layers` (the input of layer i: HF index i)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

TOP_LEVEL = "hf"
EAGLE_CONFIG = "sglang"
LLAMA_CPP = "llama.cpp"
LLAMA_CPP_KEY = "eagle3.target_layers"


def engine_default_hf(num_layers: int) -> list[int]:
    """The engines' default capture without configured ids: HF ``[2, L//2, L-3]``."""
    L = num_layers
    return [2, L // 2, L - 3]


@dataclass(frozen=True)
class EngineCapture:
    """What one engine captures and feeds to a draft's fc, given the draft's config."""

    engine: str
    configured: tuple[int, ...] | None  # the ids as written in the config, None: engine default
    source: str  # where the ids came from, in words
    hf_indices: tuple[int, ...]  # captured states, ascending: the fc input in block order
    notes: tuple[str, ...] = ()
    fatal: str | None = None  # the engine fails on this config before serving a token

    def problem(self, n_blocks: int | None) -> str | None:
        """Why this engine cannot serve the draft (None when it can)."""
        if self.fatal:
            return self.fatal
        if n_blocks is not None and len(self.hf_indices) != n_blocks:
            why = "; ".join((self.source, *self.notes))
            return (
                f"{self.engine} captures {len(self.hf_indices)} states (HF {list(self.hf_indices)}) "
                f"for a draft whose fc takes {n_blocks}, so it cannot serve it ({why})"
            )
        return None


def finish(
    key: str,
    ids: Sequence[int] | None,
    wanted: list[int],
    source: str,
    reach: range,
    notes: list[str],
    fatal: str | None,
    L: int,
) -> EngineCapture:
    """The capture once a release has said what it wants and what it can reach: ids past either
    end select no layer (the unreachable last layer has its own note), a repeat is captured once."""
    lost = [k for k in wanted if k not in reach and k != L and not (k == 0 and fatal)]
    if lost:
        notes.append(f"HF {lost} match no layer the engine captures and are dropped")
    captured = tuple(sorted({k for k in wanted if k in reach}))
    if len(set(wanted)) != len(wanted):
        notes.append(f"ids listed twice are captured once: {wanted} -> {list(captured)}")
    return EngineCapture(
        engine=key,
        configured=tuple(ids) if ids is not None else None,
        source=source,
        hf_indices=captured,
        notes=tuple(notes),
        fatal=fatal,
    )


@dataclass(frozen=True)
class CaptureRelease:
    """One release line's capture: `key` names it (`capture --engine`), `default_name` words it
    in the doctor's default-feed rows (None: no row of its own), `default_rank` orders them."""

    key: str
    capture: Callable[[list[int] | None, str | None, int], EngineCapture]
    default_name: str | None = None
    default_rank: int = 0
