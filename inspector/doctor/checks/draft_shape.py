"""A loaded draft's shape as engines see it (its config.json as written, its tensors), the
`draft_shape` finding, and the draft as one engine release runs it.

`shape_support` holds the engines' rules (pure); this module reads the draft's folder. An engine
that runs a draft without one of its features (SGLang 0.5.23 without a Qwen3 layer's q/k norms or
without the input norms of layers after the first; llama.cpp 0c1e570 without norm_output) logs the
accept length of that other draft: `as_engine_runs` builds it, so the replay, the live loop and
`reconcile` compute what that engine logs, not what the weights could give.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import torch

from inspector.doctor.checks.shape_support import shape_finding
from inspector.doctor.finding import Finding
from inspector.draft import Draft
from inspector.engines import engine as serving_engine
from inspector.engines.shapes import DraftShape, Drop, Support, Verdict, shape_of
from inspector.errors import InputError
from inspector.formats.tensorfiles import read_json

NORM_FLAGS = ("norm_before_fc", "fc_norm", "norm_output")


def config_flag(cfg: dict, key: str) -> bool:
    """A norm flag as config.json states it (top level or in transformer_layer_config; only a
    JSON true sets it; SpecForge's `use_aux_norm` is fc_norm, as SGLang reads it)."""
    layer = cfg.get("transformer_layer_config")
    if key == "fc_norm" and cfg.get("use_aux_norm") is True:
        return True
    return cfg.get(key) is True or (isinstance(layer, dict) and layer.get(key) is True)


def raw_config(draft: Draft) -> dict | None:
    """The draft's config.json as written; None when the draft was not loaded from a folder
    (a GGUF) or the file does not read as a JSON object (`read_json` refuses anything else)."""
    folder = Path(draft.path) if draft.path else None
    if folder is None or not (folder / "config.json").is_file():
        return None
    try:
        return read_json(folder / "config.json")
    except InputError:
        return None


def stated_flags(draft: Draft) -> dict[str, bool] | None:
    """The norm flags as config.json states them (the loader turns a flag on when its tensors
    are stored, engines do not); None when the draft was not loaded from a folder."""
    cfg = raw_config(draft)
    return _flags(cfg) if cfg is not None else None


def _flags(cfg: dict) -> dict[str, bool]:
    return {flag: config_flag(cfg, flag) for flag in NORM_FLAGS}


def draft_shape(draft: Draft) -> DraftShape | None:
    """The shape engines see: the norm flags as config.json states them (what they follow), the
    rest as the tensors hold it; None for a draft not loaded from a folder."""
    cfg = raw_config(draft)
    if cfg is None:
        return None
    c = draft.config
    return shape_of(
        cfg,
        slots=c.num_fc_blocks,
        layers=c.num_layers,
        qk_norm="layers.0.self_attn.q_norm.weight" in draft.weights,
        mla=c.mla is not None,
        flags=_flags(cfg),  # config.json read once
        later_hidden_norms=all(
            f"layers.{i}.hidden_norm.weight" in draft.weights for i in range(1, c.num_layers)
        ),
    )


def draft_shape_finding(draft: Draft, engines: Sequence[str] | None = None) -> Finding | None:
    """The `draft_shape` finding of a draft loaded from a folder (see shape_support)."""
    shape = draft_shape(draft)
    return shape_finding(shape, engines) if shape is not None else None


def engine_verdict(draft: Draft, engine: str) -> Verdict | None:
    """What `engine` (any spelling the registry reads) does with this draft; None where no rule
    knows its shape or the draft has no config.json."""
    shape = draft_shape(draft)
    rule = serving_engine(engine).shape_rule
    return rule(shape) if shape is not None and rule is not None else None


def without_dropped(draft: Draft, verdict: Verdict) -> Draft:
    """The draft as an engine that runs it without something runs it."""
    if verdict.support is not Support.DROPS:
        return draft
    w = dict(draft.weights)
    cfg = draft.config
    if Drop.QK_NORMS in verdict.drops:
        for name in [n for n in w if n.endswith(("self_attn.q_norm.weight", "k_norm.weight"))]:
            del w[name]
    if Drop.LATER_INPUT_NORMS in verdict.drops:
        for i in range(1, cfg.num_layers):
            name = f"layers.{i}.input_layernorm.weight"
            w[name] = torch.ones_like(w[name])
    if Drop.NORM_OUTPUT in verdict.drops:
        cfg = replace(cfg, norm_output=False)
    return replace(draft, config=cfg, weights=w)


def as_engine_runs(draft: Draft, engine: str) -> tuple[Draft, Verdict | None]:
    """(the draft as `engine` runs it, the verdict when it drops something, else None)."""
    verdict = engine_verdict(draft, engine)
    if verdict is None or verdict.support is not Support.DROPS:
        return draft, None
    return without_dropped(draft, verdict), verdict
