"""The serving engines, one module each, registered here under one `Engine` id.

Every `--engine` choice, every report's engine words and every release come from here:
`engine(e)` is the engine's `ServingEngine` (identity, releases, readings, shape rule, counting,
conventions, launch line); `parse_engine` reads the spellings people type. Adding an engine is one
new module and one line in `_MODULES`.

A leaf below every other layer: pure data, no torch, so the app can word an engine before its
first paint."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence

from inspector.engines import llamacpp, ort_genai, sglang, vllm
from inspector.engines.base import ServingEngine
from inspector.engines.capture import CaptureRelease
from inspector.engines.ids import REGISTRY, Engine
from inspector.engines.reading import Reader

_MODULES = (vllm, sglang, llamacpp, ort_genai)
REGISTRY.update({m.ENGINE.id: m.ENGINE for m in _MODULES})
ENGINES = tuple(e.value for e in REGISTRY)
# the engines whose accept length the tool replays and holds (a release runs EAGLE-3)
SERVING = tuple(e for e, s in REGISTRY.items() if s.runs_eagle3)
CHAIN_ONLY = tuple(e for e in SERVING if not REGISTRY[e].trees)


def _key(text: str) -> str:
    return "".join(c for c in text.strip().lower() if c not in ".-_ ")


_ALIASES = {_key(a): e for e, s in REGISTRY.items() for a in (e.value, s.display, *s.aliases)}


def engine(which: Engine | str) -> ServingEngine:
    """The engine `which` names: an `Engine`, or any of its spellings ("llama.cpp", "vLLM")."""
    if isinstance(which, Engine):
        return REGISTRY[which]
    found = _ALIASES.get(_key(which))
    if found is None:
        raise KeyError(f"unknown engine {which!r} ({', '.join(ENGINES)})")
    return REGISTRY[found]


def engine_id(which: Engine | str) -> Engine:
    """The id of the engine `which` names (any spelling)."""
    return engine(which).id


def engine_words(which: Engine | str) -> str:
    """How a report names an engine ("vLLM", "llama.cpp"); an unknown name as it is."""
    try:
        return engine(which).display
    except KeyError:
        return str(which)


def all_engines() -> tuple[ServingEngine, ...]:
    return tuple(REGISTRY.values())


def engines_named(names: Iterable[Engine | str] | None) -> tuple[ServingEngine, ...]:
    """The engines `names` names (None: every one), in registry order."""
    if names is None:
        return all_engines()
    wanted = {engine_id(n) for n in names}
    return tuple(s for e, s in REGISTRY.items() if e in wanted)


def readers() -> tuple[Reader, ...]:
    """Every engine release's readings of a draft config, in registry order."""
    return tuple(r for s in REGISTRY.values() for r in s.readers)


def capture_releases() -> tuple[CaptureRelease, ...]:
    """Every engine release line's capture (`capture --engine` takes their keys)."""
    return tuple(c for s in REGISTRY.values() for c in s.captures)


def capture_release(key: str) -> CaptureRelease:
    for c in capture_releases():
        if c.key == key:
            return c
    keys = ", ".join(c.key for c in capture_releases())
    raise ValueError(f"unknown engine {key!r} ({keys})")


def default_engine(is_chain: bool) -> Engine:
    """vLLM for chains, SGLang for trees (vLLM has no tree drafting)."""
    return Engine.VLLM if is_chain else Engine.SGLANG


def parse_engine(text: str | None, is_chain: bool, *, serving: bool = True) -> Engine:
    """The engine `text` names, in any of the spellings people type (vllm / vLLM, llamacpp /
    llama.cpp / llama-cpp, ort-genai / onnxruntime-genai; any case); an unknown name is an
    InputError that says the nearest one. None: the default for a chain or a tree. `serving`:
    only engines whose accept length the tool replays (ONNX Runtime GenAI runs no EAGLE-3)."""
    from inspector.errors import InputError, setting_field

    if text is None:
        return default_engine(is_chain)
    choices = SERVING if serving else tuple(REGISTRY)
    names = ", ".join(e.value for e in choices)
    found = _ALIASES.get(_key(text))
    if found is None:
        near = difflib.get_close_matches(_key(text), list(_ALIASES), n=1, cutoff=0.65)
        hint = f"; did you mean {_ALIASES[near[0]].value!r}?" if near else ""
        raise InputError(None, setting_field("engine"), f"{text!r}: one of {names}{hint}") from None
    spec = REGISTRY[found]
    if found not in choices:
        raise InputError(
            None,
            setting_field("engine"),
            f"{spec.display} {spec.release}: no release runs an EAGLE-3 draft, so there is no "
            f"accept length to replay (one of {names}; `doctor` says what it feeds)",
        )
    if not spec.trees and not is_chain:
        raise InputError(
            None,
            setting_field("engine"),
            f"{found.value} drafts chains only (--topk 1): trees are SGLang's",
        )
    return found


COMMON_CONVENTIONS = {
    "accept_length": "1 + accepted / rounds, pooled over every round of every request",
    "accepted": (
        "drafted tokens that matched the target's own continuation, in a request's last "
        "round also past its stop (EOS or max tokens), as the engine counts them"
    ),
    "emitted_per_round": "tokens the requests received per round (the last round cut at the stop)",
    "per_depth": "[k]: share of rounds accepting at least k + 1 drafted tokens",
}


def conventions(which: Engine | str) -> dict[str, str]:
    """What each pooled figure of a report means under `which`, for the JSON."""
    spec = engine(which)
    return {**COMMON_CONVENTIONS, "engine": spec.value, **spec.conventions}


__all__: Sequence[str] = (
    "CHAIN_ONLY",
    "ENGINES",
    "Engine",
    "REGISTRY",
    "SERVING",
    "ServingEngine",
    "all_engines",
    "capture_release",
    "capture_releases",
    "conventions",
    "default_engine",
    "engine",
    "engine_id",
    "engine_words",
    "engines_named",
    "parse_engine",
    "readers",
)
