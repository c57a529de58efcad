"""What `diagnose` is asked for (`DiagnoseSettings`), what the doctor's checks read
(`DoctorContext`, built once by `diagnose.build_context`) and
one wiring search's result (`Searched`): the values the stages pass along, in a module of their
own so that a stage in its own module reads them without importing `diagnose` back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from inspector.doctor.budget import DoctorPlan
from inspector.doctor.checks.slot_identity import SlotIdentity
from inspector.doctor.report import WiringResult
from inspector.doctor.wiring.named import NamedWirings
from inspector.doctor.wiring.search import WiringSearch
from inspector.draft import Draft
from inspector.evaluate import Evaluator
from inspector.progress import StageProgress
from inspector.sample import SlotInfo
from inspector.serving.sampling_settings import SamplingSettings

if TYPE_CHECKING:
    from inspector.capture.transformers_target import TargetModel

DEFAULT_SAMPLES = 8


@dataclass(frozen=True)
class DiagnoseSettings:
    """What `diagnose` is asked for.

    n_samples: how many samples (the first ones) every check runs on; sample_indices overrides.
    slot_layers: HF index of every slot, overriding data_config.json (and `ev.slot_layers`).
    target_config: the target's config.json (or folder), for its rope settings; defaults to the
      evaluator's target head folder.
    target: the target model's folder: when given, it runs over two samples and every slot is
      matched to the hidden state it equals (`slot_identity`); needs transformers. With the
      evaluator's target head too, the draft's own lm_head is scored against the target's.
    head_borrowed: the draft's lm_head is the target's, borrowed for a draft that ships none
      (the pipeline's `lm_head` finding says so): no comparison of the two.
    prune: drop clearly worse wirings after the first samples (False: evaluate all on all).
    max_tokens: read each sample up to this many tokens; None: as many as the compute budget
      allows (`budget.plan`: whole samples for small drafts), 0: whole samples.
    sampling / target_dtype: the wiring finding's accept length is the expectation at this
      temperature, the target (run in target_dtype) verifying the drafts; greedy sampling is
      the same as None (replayed, no target run).
    engines: the engines whose reading of the config the engine_feeds finding shows (the
      registry's ids; None: all).
    """

    n_samples: int = DEFAULT_SAMPLES
    sample_indices: Sequence[int] | None = None
    slot_layers: Sequence[int] | None = None
    target_config: str | Path | None = None
    target: str | Path | None = None
    head_borrowed: bool = False
    prune: bool = True
    max_tokens: int | None = None
    sampling: SamplingSettings | None = None
    target_dtype: str = "auto"
    engines: Sequence[str] | None = None

    def indices(self, n_available: int) -> Sequence[int]:
        """The samples asked for, of the `n_available` the evaluator holds."""
        if self.sample_indices is not None:
            return self.sample_indices
        return range(min(max(1, self.n_samples), n_available))


@dataclass(frozen=True)
class DoctorContext:
    """What the checks read, built once by `build_context` (and narrowed once, with `scored`,
    to the samples the search could score).

    ev: the evaluator over the samples as read (cut to the compute budget, `plan`).
    samples: the sample indices every check runs on.
    infos: the slots, labelled as `identity` decided.
    names: the wirings the report quotes by name (configured, train, serve, engine default).
    target / target_dtype: the target model's folder and the dtype it is run in.
    sampling: the requests' sampling and the engine's rule the accept length is quoted at
      (None: greedy, replayed; else expected, from the target's verification of the drafts).
    target_model: the target, loaded once on the evaluator's device at a temperature (the
      slots' identity ran it too); None when greedy.
    """

    ev: Evaluator
    samples: tuple[int, ...]
    infos: list[SlotInfo]
    identity: SlotIdentity
    names: NamedWirings
    plan: DoctorPlan
    prune: bool = True
    progress: StageProgress | None = None
    target: str | Path | None = None
    target_dtype: str = "auto"
    sampling: SamplingSettings | None = None
    target_model: TargetModel | None = None

    def scored(self, skipped: dict[int, str]) -> DoctorContext:
        """This context without the samples the search could not score."""
        return replace(self, samples=tuple(i for i in self.samples if i not in skipped))


@dataclass(frozen=True)
class Searched:
    """One wiring search under one pairing (`shift`) and draft (None: the evaluator's), and its
    ranked results."""

    ws: WiringSearch
    results: list[WiringResult]
    shift: int = 0
    draft: Draft | None = None

    @property
    def corrected(self) -> bool:
        """Scored with a config correction (the engine would run the draft as configured)."""
        return self.draft is not None
