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
======================================  ==============================  ===========================

SGLang captures ``hidden + residual`` *before* layer j for j in 0..L-1, so it reaches HF 0..L-1
only: the last layer's output (HF L) is never captured, and HF 0 (id -1) needs a target model file
that guards ``residual is None`` at layer 0 (the plain ``llama.py`` raises there). Every engine
concatenates what it captured in ascending layer order (the order its layer loop reaches the
layers), whatever order the config lists, and an id listed twice is captured once; a state count
other than the draft's fc blocks means the engine cannot serve the draft at all.

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
# "hf" for a top-level eagle_aux_hidden_state_layer_ids, "sglang" for eagle_config's.
TOP_LEVEL = "hf"
EAGLE_CONFIG = "sglang"

ENGINES = ("vllm", "vllm-pre36063", "sglang", "sglang-pre25454")


def engine_default_hf(num_layers: int) -> list[int]:
    """The engines' default capture without configured ids: HF ``[2, L//2, L-3]``."""
    L = num_layers
    return [2, L // 2, L - 3]


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
            where = "top-level" if convention == TOP_LEVEL else "eagle_config"
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
                notes.append(
                    f"SGLang reads eagle_config.eagle_aux_hidden_state_layer_ids only: the "
                    f"top-level ids {ids} are not seen"
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
