"""Which target hidden states each trainer and serving engine captures for a draft's configured
aux layer ids, as HF ``output_hidden_states`` indices. Pure functions: no torch, no files.

HF index k means ``output_hidden_states[k]`` of an L-layer target: 0 is the embedding output,
k in 1..L-1 is the output of decoder layer k-1, and L is the last decoder layer's output taken
*before* the final norm (the state engines capture; transformers itself returns the post-norm
state at index L).

Where a draft's config.json keeps its ids, and what an id ``i`` then selects:

======================================  ==============================  ===========================
reader                                  where it reads the ids          HF index of id ``i``
======================================  ==============================  ===========================
vLLM, EagleModelMixin capture           top-level                       ``i`` (0 = embedding,
(vllm PR #36063)                        ``eagle_aux_hidden_state_       L = last layer, pre-norm);
                                        layer_ids``, else               default ``(2, L//2, L-3)``
                                        ``eagle_config.<same key>``
vLLM before the mixin (2025             same                            ``i`` for 1 <= i <= L-1;
``llama.py``: captures                                                  id 0 crashes (no residual
``hidden + residual`` before layer i)                                   yet), id L is never reached
SGLang before PR #25454                 ``eagle_config`` only (a        ``i + 1`` for every explicit
                                        top-level key is not seen)      id, so -1 = embedding;
                                                                        default ``[2, L//2, L-3]``
                                                                        with no +1
SGLang since PR #25454 (2026-05-16)     ``eagle_config`` only           ``i + 1`` only when the
                                                                        first id is 1, else ``i``
SpecForge trainer                       ``eagle_config``                ``i + 1`` (output of layer
(``aux_hidden_states_layers``)                                          i); default ``[1, L//2-1,
                                                                        L-4]`` = HF ``[2, L//2,
                                                                        L-3]``
speculators >= v0.5 trainer             top-level                       ``i`` (the vLLM convention);
                                                                        data ids ``[2, L//2, L-3]``
                                                                        plus ``L``
speculators <= v0.4 samples             ``data_config.json``            ``i + 1`` (output of layer
(``hidden_states.layer_ids``)           ``hidden_states.layer_ids``     i); default ``[2, L//2,
                                                                        L-3, L-1]``
EAGLE ``traineagle3``                   fixed                           HF ``[2, L//2, L-3]``
llama.cpp (a GGUF draft, PR #18039)     the GGUF's                      ``i`` for i < L (the input
                                        ``eagle3.target_layers``,       of layer i, ``t_layer_inp``);
                                        written by the converter        ``i = L``: the final state
                                        from top-level                  only where the target's
                                        ``eagle_aux_hidden_state_       graph sets it, else nothing;
                                        layer_ids``, else               ``i > L`` aborts; fed in the
                                        ``[2, n//2, n-3]``              order listed
======================================  ==============================  ===========================

SGLang captures ``hidden + residual`` *before* layer j for j in 0..L-1, so it reaches HF 0..L-1
only: the last layer's output (HF L) is never captured, and HF 0 (id -1) needs a target model file
that guards ``residual is None`` at layer 0 (the plain ``llama.py`` raises there). Every engine
concatenates what it captured in ascending layer order (the order its layer loop reaches the
layers), whatever order the config lists, and an id listed twice is captured once; a state count
other than the draft's fc blocks means the engine cannot serve the draft at all.

llama.cpp (``common/speculative.cpp``, llama.cpp@0c1e57098) copies the listed states into fc's
input in the order the GGUF lists them, not sorted, and its runtime takes exactly 3 ids
(``src/models/eagle3.cpp``). Its converter (``convert_hf_to_gguf.py``, ``LlamaModel.__init__`` in
``conversion/llama.py``) reads only a top-level ``eagle_aux_hidden_state_layer_ids`` (since llama.cpp
PR #25794; before it, always the fallback) and otherwise writes ``[2, n//2, n-3]`` of the target's
``num_hidden_layers`` n: ids nested under ``eagle_config`` are not read (PR #27040, unmerged). An id
equal to the layer count asks for the final state, which only some target graphs set (gpt-oss,
Qwen3.5, Gemma 4); on a Llama-family target the slot is left as it was: zeros, or in ``llama-server``
whatever an earlier request left there (``src/llama-context.cpp``), with no warning.

Worked mapping for a 61-layer target: SGLang ``[2, 30, 58]`` before #25454 is HF ``[3, 31, 59]``;
the SGLang list ``[-1, 2, 30]`` is HF ``[0, 3, 31]`` before #25454 (vLLM writes the same as
``[0, 3, 31]``), while since #25454 it gets no +1, so -1 matches no layer and only HF ``[2, 30]``
are captured; the vLLM default ``(2, 30, 58)``, SpecForge ``[1, 29, 57]`` and HF ``[2, 30, 58]``
are the same three states.
"""

from __future__ import annotations

from collections.abc import Sequence

from inspector.engines import capture_release, capture_releases
from inspector.engines.capture import (
    EAGLE_CONFIG,
    LLAMA_CPP,
    LLAMA_CPP_KEY,
    TOP_LEVEL,
    EngineCapture,
    engine_default_hf,
)
from inspector.engines.sglang import hf_indices as sglang_hf_indices

# Config conventions as recorded by the checkpoint loader (DraftConfig.aux_layer_convention):
# "hf" for a top-level eagle_aux_hidden_state_layer_ids, "sglang" for eagle_config's, "llama.cpp"
# for a GGUF's eagle3.target_layers (id i = the input of target layer i = HF index i). They are
# the engines' (`engines.capture`), re-exported here for the capture plan and the doctor.
__all__ = [
    "EAGLE_CONFIG",
    "ENGINES",
    "LLAMA_CPP",
    "LLAMA_CPP_KEY",
    "TOP_LEVEL",
    "EngineCapture",
    "engine_capture",
    "engine_default_hf",
    "legacy_layer_ids_to_hf",
    "sglang_hf_indices",
    "trainer_hf_indices",
]
ENGINES = tuple(c.key for c in capture_releases())


def trainer_hf_indices(aux_ids: Sequence[int], convention: str | None) -> list[int]:
    """HF indices the draft was trained on, reading its configured ids the way its layout's trainer
    writes them: top-level ids (speculators, vLLM convention) are HF indices; ``eagle_config`` ids
    (SpecForge, SGLang convention) are decoder-layer outputs, HF index = id + 1."""
    if convention == EAGLE_CONFIG:
        return [int(i) + 1 for i in aux_ids]
    return [int(i) for i in aux_ids]


def legacy_layer_ids_to_hf(layer_ids: Sequence[int]) -> list[int]:
    """speculators <= v0.4 ``data_config.json`` ``hidden_states.layer_ids`` (output of layer i) as
    HF indices: i + 1."""
    return [int(i) + 1 for i in layer_ids]


def engine_capture(
    engine: str,
    aux_ids: Sequence[int] | None,
    convention: str | None,
    num_layers: int,
) -> EngineCapture:
    """The HF indices ``engine`` captures for a draft whose config holds ``aux_ids`` where
    ``convention`` says (:data:`TOP_LEVEL` or :data:`EAGLE_CONFIG`; None: no ids), for a target
    of ``num_layers`` decoder layers."""
    return capture_release(engine).capture(
        [int(i) for i in aux_ids] if aux_ids else None, convention, num_layers
    )
