"""The app's first answer to "why is my acceptance low": the wiring the weights were trained on,
as the doctor finds it, beside the wiring an engine feeds.

The trained wiring is `doctor.wiring.trained.find_trained_wiring`'s (the doctor's step-0 search
on the first readable samples, asked of the weights, never of the config). What an engine feeds:

- the wiring the config's aux layer ids select, where it is not the trained one (an engine
  reading this config feeds it: the config is where the wiring bug lives);
- else the serve preset, where it differs: what an engine that captures decoder-layer outputs
  and appends the last layer feeds (`wiring.serve_wiring`), the mismatch the doctor's wiring
  finding quotes as "an engine feeding";
- else the trained wiring itself (nothing to fix in the wiring).

The main screen shows the two side by side (the trained one current, the fed one pinned as the
reference), so the accuracy bar gives their accuracy and τ on this sample and the set, and the
gap. Device thread only (the search runs the draft); no Textual, no Rich.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from inspector.progress import StageProgress
    from inspector.wiring import WiringKey

# Why an engine feeds the fed wiring (`FirstLook.fed_why`).
FED_BY_CONFIG = "config"  # the config's aux layer ids select it
FED_BY_CAPTURE = "serve"  # an engine capturing decoder-layer outputs feeds it (the serve preset)
FED_AS_TRAINED = "trained"  # the config selects the trained wiring, and so does serve


@dataclass(frozen=True)
class FirstLook:
    """The trained wiring (the doctor's search) and the wiring an engine feeds (see the module
    docstring for which); `samples`: how many samples the search scored."""

    trained: WiringKey
    fed: WiringKey
    fed_why: str  # FED_BY_CONFIG, FED_BY_CAPTURE or FED_AS_TRAINED
    samples: int
    configured: WiringKey | None  # what the config's ids select among the slots (None: none)

    @property
    def gap(self) -> bool:
        """Whether the engine feeds another wiring than the trained one."""
        return self.fed != self.trained

    def fed_words(self) -> str:
        """Who feeds the fed wiring, in a few words (the header and the bar quote them)."""
        return {
            FED_BY_CONFIG: "what the config's layer ids select",
            FED_BY_CAPTURE: "what an engine capturing decoder-layer outputs feeds",
            FED_AS_TRAINED: "the config selects the trained wiring",
        }[self.fed_why]


def choose_fed(
    trained: WiringKey, configured: WiringKey | None, serve: WiringKey | None
) -> tuple[WiringKey, str]:
    """(the wiring an engine feeds, why): the configured one where it is not the trained one,
    else the serve preset where it differs, else the trained one."""
    if configured is not None and tuple(configured) != tuple(trained):
        return tuple(configured), FED_BY_CONFIG
    if serve is not None and tuple(serve) != tuple(trained):
        return tuple(serve), FED_BY_CAPTURE
    return tuple(trained), FED_AS_TRAINED


def arranged(
    look: FirstLook,
    wiring: WiringKey | None,
    pins: Sequence[WiringKey],
    initial: WiringKey | None,
) -> tuple[WiringKey, list[WiringKey]] | None:
    """(the wiring to show, the pins) once the search answered: the trained wiring with the fed
    one pinned beside it as the reference, where the screen is still as the app opened it (the
    configured wiring alone, no pin); None where the user chose already, or nothing changes."""
    if wiring != initial or pins:
        return None
    shown = (look.trained, [look.fed] if look.gap else [])
    return None if shown == (wiring, []) else shown


def first_look_task(
    presets: Mapping[str, WiringKey | None], progress: StageProgress | None = None
) -> Callable[[Any], FirstLook]:
    """The engine task (`DeviceThread.submit("first_look", ...)`): the doctor's search on the backend's
    evaluator, and the wiring an engine feeds; `presets`: the session's (the serve preset);
    `progress(stage, done, total)`: called from the device thread as the search goes (on a
    large draft on CPU it takes a while, and the bar says how far it got). The task takes a
    `backend.Backend` (not imported here: the summary names `FirstLook`, and the backend's types
    name the summary)."""
    serve = presets.get("serve")

    def job(backend: Any) -> FirstLook:
        from inspector.doctor.wiring.trained import find_trained_wiring

        tw = find_trained_wiring(backend.evaluator, progress=progress)
        fed, why = choose_fed(tw.wiring, tw.configured, serve)
        return FirstLook(tuple(tw.wiring), fed, why, len(tw.samples), tw.configured)

    return job
