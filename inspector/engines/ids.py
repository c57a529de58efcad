"""The engines the tool knows, by one id each: the only spelling the code compares.

A leaf (no torch), so the app can word an engine before its first paint. What each id means
(its releases, readings, counting, logs) is its module's: `inspector.engines.<id>`, reached
through the registry (`inspector.engines.engine`)."""

from __future__ import annotations

from enum import Enum
from typing import Any


class Engine(str, Enum):
    VLLM = "vllm"
    SGLANG = "sglang"
    LLAMACPP = "llamacpp"
    ORT_GENAI = "ort-genai"

    def __str__(self) -> str:  # f-strings and JSON write the id, not "Engine.VLLM"
        return self.value

    # Lookups through the registry, so that code reads `engine.overlap_round` and the fact
    # stays in the engine's module.
    @property
    def spec(self) -> Any:  # a ServingEngine (base imports this module)
        return REGISTRY[self]

    @property
    def display(self) -> str:
        return self.spec.display

    @property
    def label(self) -> str:
        """The engine and its release as reports name them: "SGLang 0.5.23"."""
        return self.spec.label

    def says(self, key: str) -> str:
        """A sentence a report quotes about this engine (its module's `SAYS[key]`)."""
        return self.spec.says[key]

    @property
    def overlap_round(self) -> bool:
        return self.spec.overlap_round

    @property
    def caps_at_remaining(self) -> bool:
        return self.spec.caps_at_remaining


# Filled by `inspector.engines` (which every import of this module runs first) from the engines'
# modules: kept here so that an id reaches its engine without importing the registry back.
REGISTRY: dict[Engine, Any] = {}
