"""How every report names a serving engine: a leaf module (no torch, no package that loads one),
so the app can word an engine before its first paint."""

from __future__ import annotations

ENGINE_WORDS = {"vllm": "vLLM", "sglang": "SGLang", "llamacpp": "llama.cpp"}


def engine_words(engine: str) -> str:
    """How a report names the engine an `EngineLog.engine` (or `Engine`) value stands for."""
    return ENGINE_WORDS.get(engine, engine)
