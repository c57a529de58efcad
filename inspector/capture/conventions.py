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
from dataclasses import dataclass

# Config conventions as recorded by the checkpoint loader (DraftConfig.aux_layer_convention):
# "hf" for a top-level eagle_aux_hidden_state_layer_ids, "sglang" for eagle_config's, "llama.cpp"
# for a GGUF's eagle3.target_layers (id i = the input of target layer i = HF index i).
TOP_LEVEL = "hf"
EAGLE_CONFIG = "sglang"
LLAMA_CPP = "llama.cpp"
LLAMA_CPP_KEY = "eagle3.target_layers"
TOP_LEVEL_KEY = "eagle_aux_hidden_state_layer_ids"
# How many ids llama.cpp@0c1e57098's eagle3 runtime takes (src/models/eagle3.cpp).
LLAMA_CPP_ID_COUNT = 3
# Target model_types (config.json) whose llama.cpp graph taps every layer's input but sets no final
# ("nextn") state, so an id equal to the layer count feeds nothing: src/models/llama.cpp (llama,
# mistral), qwen3.cpp, qwen3moe.cpp, lfm2.cpp, minimax-01.cpp, minimax-m2.cpp at
# llama.cpp@0c1e57098; qwen2.cpp sets neither there.
LLAMA_CPP_NO_FINAL_STATE = frozenset(
    {"llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "lfm2", "minimax", "minimax_m2"}
)

ENGINES = ("vllm", "vllm-pre36063", "sglang", "sglang-pre25454")


def engine_default_hf(num_layers: int) -> list[int]:
    """The engines' default capture without configured ids: HF ``[2, L//2, L-3]``."""
    L = num_layers
    return [2, L // 2, L - 3]


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


def sglang_hf_indices(ids: Sequence[int], *, since_25454: bool) -> list[int]:
    """HF index each explicit SGLang id selects, in list order (unreachable ones included)."""
    shift = 1 if (not since_25454 or (len(ids) > 0 and ids[0] == 1)) else 0
    return [int(i) + shift for i in ids]


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


def engine_capture(
    engine: str,
    aux_ids: Sequence[int] | None,
    convention: str | None,
    num_layers: int,
) -> EngineCapture:
    """The HF indices ``engine`` captures for a draft whose config holds ``aux_ids`` where
    ``convention`` says (:data:`TOP_LEVEL` or :data:`EAGLE_CONFIG`; None: no ids), for a target
    of ``num_layers`` decoder layers."""
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r} ({', '.join(ENGINES)})")
    L = num_layers
    ids = [int(i) for i in aux_ids] if aux_ids else None
    notes: list[str] = []
    fatal: str | None = None
    if engine.startswith("vllm"):
        # vLLM reads the top-level key first, then eagle_config, both as HF indices.
        if ids is None:
            wanted, source = engine_default_hf(L), "vLLM default (2, L//2, L-3)"
        else:
            where = {TOP_LEVEL: "top-level", LLAMA_CPP: f"GGUF {LLAMA_CPP_KEY}"}.get(
                convention or "", "eagle_config"
            )
            wanted, source = list(ids), f"{where} ids {ids}, read as HF indices"
        if engine == "vllm":
            reach = range(0, L + 1)
        else:
            reach = range(1, L)
            if 0 in wanted:
                fatal = (
                    "vLLM before PR #36063 crashes on id 0 (the embedding: no residual before "
                    "layer 0); it needs the EagleModelMixin capture"
                )
            if L in wanted:
                notes.append(f"id {L} (last layer) is never reached before PR #36063")
    else:
        since = engine == "sglang"
        if ids is None or convention != EAGLE_CONFIG:
            wanted, source = engine_default_hf(L), "SGLang default [2, L//2, L-3] (no +1)"
            if ids is not None:
                where = f"GGUF {LLAMA_CPP_KEY}" if convention == LLAMA_CPP else "top-level ids"
                notes.append(
                    f"SGLang reads eagle_config.eagle_aux_hidden_state_layer_ids only: the "
                    f"{where} {ids} are not seen"
                )
        else:
            wanted = sglang_hf_indices(ids, since_25454=since)
            rule = "+1 only when the first id is 1" if since else "+1 on every explicit id"
            source = f"eagle_config ids {ids}, {rule}"
        reach = range(0, L)  # captured before layer j: the last layer's output is never reached
        if 0 in wanted:
            notes.append(
                "HF 0 (the embedding, id -1) needs a target model file that guards "
                "`residual is None` at layer 0; the plain llama.py raises there"
            )
        if L in wanted:
            notes.append(
                f"HF {L} (the last layer's output) is never reached: SGLang captures before "
                "each layer"
            )
    # Ids past either end select no layer (the unreachable last layer has its own note above).
    lost = [k for k in wanted if k not in reach and k != L and not (k == 0 and fatal)]
    if lost:
        notes.append(f"HF {lost} match no layer the engine captures and are dropped")
    captured = tuple(sorted({k for k in wanted if k in reach}))
    if len(set(wanted)) != len(wanted):
        notes.append(f"ids listed twice are captured once: {wanted} -> {list(captured)}")
    return EngineCapture(
        engine=engine,
        configured=tuple(ids) if ids is not None else None,
        source=source,
        hf_indices=captured,
        notes=tuple(notes),
        fatal=fatal,
    )
