"""llama.cpp's converter and its eagle3 graph: which ids `convert_hf_to_gguf.py` writes into a
GGUF from a draft's config.json, whether it takes the folder for an EAGLE-3 draft at all, and which
target states the graph then feeds fc (`common/speculative.cpp`), at the commit `llamacpp.RELEASE`
names (vendored by llama-cpp-python's sdist).

The converter (`LlamaModel.__init__` in `conversion/llama.py`) reads only a top-level
`eagle_aux_hidden_state_layer_ids` (since llama.cpp PR #25794; before it, always the fallback)
and otherwise writes `[2, n//2, n-3]` of the target's `num_hidden_layers` n: ids nested under
`eagle_config` are not read. The graph copies the listed states into fc's input in the order the
GGUF lists them, and its runtime takes exactly 3 ids (`src/models/eagle3.cpp`). An id equal to the
layer count asks for the final state, which only some target graphs set (gpt-oss, Qwen3.5,
Gemma 4); on a Llama-family target the slot is left as it was: zeros, or in `llama-server`
whatever an earlier request left there, with no warning.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from inspector.engines.capture import engine_default_hf

TOP_LEVEL_KEY = "eagle_aux_hidden_state_layer_ids"
# The PR since which the converter reads the top-level ids (before it: always the fallback).
IDS_PR = "PR #25794"
# How many ids its eagle3 runtime takes (src/models/eagle3.cpp).
LLAMA_CPP_ID_COUNT = 3
# Target model_types (config.json) whose llama.cpp graph taps every layer's input but sets no final
# ("nextn") state, so an id equal to the layer count feeds nothing: src/models/llama.cpp (llama,
# mistral), qwen3.cpp, qwen3moe.cpp, lfm2.cpp, minimax-01.cpp, minimax-m2.cpp at
# the vendored commit; qwen2.cpp sets neither there.
LLAMA_CPP_NO_FINAL_STATE = frozenset(
    {"llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "lfm2", "minimax", "minimax_m2"}
)


def converter_fallback_ids(num_layers: int) -> list[int]:
    """llama.cpp's converter's ids without top-level ones: ``[2, n//2, n-3]`` (the engines'
    default, written as llama.cpp ids, which are HF indices)."""
    return engine_default_hf(num_layers)


@dataclass(frozen=True)
class ConverterIds:
    """What llama.cpp's converter writes as ``eagle3.target_layers`` from a draft's config.json.

    ids: since llama.cpp PR #25794 (None: the fallback, and the target's layer count unknown);
    fallback: ``[2, n//2, n-3]``, what every converter before that PR wrote (None: n unknown);
    top_level: the config's top-level ids (None: absent or empty, so the converter falls back);
    nested: ``eagle_config``'s ids, which no converter reads."""

    ids: tuple[int, ...] | None
    fallback: tuple[int, ...] | None
    top_level: tuple[int, ...] | None
    nested: tuple[int, ...] | None

    @property
    def falls_back(self) -> bool:
        return self.top_level is None


def _int_list(value: object) -> tuple[int, ...] | None:
    if not isinstance(value, list) or not value:
        return None
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        return None
    return tuple(value)


def converter_ids(config: dict, num_layers: int | None) -> ConverterIds:
    """The ids llama.cpp's converter writes for a draft's parsed config.json and a target of
    ``num_layers`` layers (``LlamaModel.__init__``: a truthy top-level list, else the fallback)."""
    top = _int_list(config.get(TOP_LEVEL_KEY))
    nested_cfg = config.get("eagle_config")
    nested = _int_list(nested_cfg.get(TOP_LEVEL_KEY)) if isinstance(nested_cfg, dict) else None
    fallback = tuple(converter_fallback_ids(num_layers)) if num_layers else None
    return ConverterIds(top if top is not None else fallback, fallback, top, nested)


def converter_detects(config: dict) -> list[str]:
    """Why llama.cpp's converter would not take this config.json for an EAGLE-3 draft ([]: it
    would): it needs `draft_vocab_size` and `num_hidden_layers` 1, read from the config with
    `transformer_layer_config` merged over it (`LlamaModel.index_tensors`); a multi-layer draft
    or one without draft_vocab_size is converted as a plain llama model."""
    layer = config.get("transformer_layer_config")
    merged = {**config, **layer} if isinstance(layer, dict) else dict(config)
    why = []
    if "draft_vocab_size" not in merged:
        why.append("no draft_vocab_size")
    n = merged.get("num_hidden_layers")
    if n != 1:
        why.append(f"num_hidden_layers {n}, not 1" if n is not None else "no num_hidden_layers")
    return why


@dataclass(frozen=True)
class LlamaCppFeed:
    """What llama.cpp feeds fc for a GGUF's ids on a target: per id (in the GGUF's order) the HF
    index it reads, None where it reads nothing; the ids equal to the layer count that read
    nothing, those past it (llama.cpp aborts), and whether its runtime takes this many ids."""

    ids: tuple[int, ...]
    hf: tuple[int | None, ...]
    num_layers: int | None
    model_type: str | None
    feeds_nothing: tuple[int, ...] = ()
    aborts: tuple[int, ...] = ()
    final_state_unknown: tuple[int, ...] = ()

    @property
    def count_ok(self) -> bool:
        return len(self.ids) == LLAMA_CPP_ID_COUNT


def llama_cpp_feed(
    ids: Sequence[int], num_layers: int | None, model_type: str | None
) -> LlamaCppFeed:
    """The states llama.cpp (``common/speculative.cpp``) feeds for ``ids`` on an L-layer target of
    this ``model_type`` (its config.json's; None: unknown): id i < L is HF index i; id L the final
    state (HF L) only on a target graph that sets it, nothing on a Llama-family one
    (:data:`LLAMA_CPP_NO_FINAL_STATE`); id > L aborts."""
    L = num_layers
    hf: list[int | None] = []
    nothing, aborts, unknown = [], [], []
    for i in (int(k) for k in ids):
        if L is None or i < L:
            hf.append(i)
        elif i == L and model_type in LLAMA_CPP_NO_FINAL_STATE:
            hf.append(None)
            nothing.append(i)
        elif i == L:
            hf.append(i)
            unknown.append(i)
        else:
            hf.append(None)
            aborts.append(i)
    return LlamaCppFeed(
        tuple(int(k) for k in ids),
        tuple(hf),
        L,
        model_type,
        tuple(nothing),
        tuple(aborts),
        tuple(unknown),
    )
