"""What an engine's log says about how it drafted, beyond its figures: whether its draft length
adapts at run time (then a replay at a fixed K is an upper bound of its figure, not an equal).

- vLLM 0.32 (`num_speculative_tokens_per_batch_size`, dynamic speculative decoding): its start-up
  line's `SpeculativeConfig(...)` prints only method, model and num_spec_tokens
  (config/speculative.py), so the schedule shows only in the warning
  "Dynamic speculative decoding changes the target verification length at runtime" (config/
  vllm.py, logged where full CUDA graphs were on), unless "Disabling
  num_speculative_tokens_per_batch_size and falling back to static" (1067-1075) follows it.
  Adaptive verification (`enable_adaptive_verification`) is DSpark's only (config/speculative.py
  551-553) and logs nothing.
- SGLang 0.5.23: the start-up line `server_args={..., 'speculative_adaptive': True, ...}`
  (srt/entrypoints/engine.py), unless "speculative_adaptive disabled: ... Falling back to
  static speculative params." (srt/arg_groups/speculative_hook.py) follows it.
- llama.cpp's `--spec-draft-p-min` (drafting stops at the first step whose draft top-1
  probability is below it) is not in a log `reconcile` reads: `--adaptive` says so.

Synthetic acceptance is not in either log: vLLM's `rejection_sample_method='synthetic'` is not in
that repr, and SGLang's `SGLANG_SIMULATE_ACC_LEN` is an environment variable it never logs
(srt/environ.py); `reconcile --synthetic-rates / --simulated-accept-len` say so.
"""

from __future__ import annotations

import re
from pathlib import Path

from inspector.engines import Engine

# the engines' names from the registry (a rename is one edit in inspector/engines/)
_SGLANG, _VLLM = (
    Engine.SGLANG.display,
    Engine.VLLM.display,
)

VLLM_DYNAMIC = "Dynamic speculative decoding changes the target verification length"
VLLM_DYNAMIC_OFF = "Disabling num_speculative_tokens_per_batch_size"
SGLANG_ADAPTIVE = re.compile(r"""['"]?\bspeculative_adaptive['"]?\s*[:=]\s*True\b""")
SGLANG_ADAPTIVE_OFF = "speculative_adaptive disabled:"


def adaptive_reason(path: Path, lines: list[str]) -> str | None:
    """Why the log's engine drafted an adaptive number of tokens a round (a sentence naming
    the line), or None where the log says nothing of it or says it fell back to a fixed K."""
    found: str | None = None
    for no, ln in enumerate(lines, start=1):
        if VLLM_DYNAMIC in ln:
            found = (
                f"{_VLLM}'s dynamic speculative decoding (num_speculative_tokens_per_batch_size, "
                f"{path.name}:{no})"
            )
        elif "server_args=" in ln and SGLANG_ADAPTIVE.search(ln):
            found = f"{_SGLANG}'s speculative_adaptive ({path.name}:{no})"
        elif VLLM_DYNAMIC_OFF in ln or SGLANG_ADAPTIVE_OFF in ln:
            found = None  # the engine fell back to its static K
    return found
