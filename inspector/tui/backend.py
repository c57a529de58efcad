"""The model side as the app's device thread sees it: `Backend`, a Protocol. No torch, no Textual.

The engine's jobs (`jobs.py`) ask a backend for a sample's arrays, its predictions, its serving
replay and its draft trees, all as numpy; nothing else of the evaluator reaches them. The one
backend, `evaluator_backend.EvaluatorBackend`, wraps the `Evaluator` and a `Replayer` and is
imported on the device thread only (`LoadResult.backend`), after torch: this module and every one
the app imports before its first paint stay free of torch (a test checks it).

Submitted tasks (the doctor, an export) are whole commands rather than views: they get the
`Evaluator` itself (`Backend.evaluator`), as the CLI gives it to them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from inspector.capture.transformers_target import TargetModel
    from inspector.evaluate import Evaluator, SamplePredictions
    from inspector.formats.tokenizer import TokenDecoder
    from inspector.memory import MemoryBudget
    from inspector.serving.sampling_settings import SamplingSettings
    from inspector.serving.spec import DraftSpec
    from inspector.tui.events import SampleAccept, SampleComparison, SampleTrees
    from inspector.tui.summary import LoggedFigure, SampleData, Summary
    from inspector.tui.tau_settings import Serving
    from inspector.wiring import WiringKey


class ServingError(Exception):
    """Settings τ cannot be replayed under on this session (the target a temperature needs does
    not load): the settings' fault, not any sample's, so no sample is marked failed."""


class Backend(Protocol):
    """What the device thread asks of the loaded draft and sample set (device thread only)."""

    @property
    def evaluator(self) -> Evaluator:
        """For submitted tasks (doctor, export), which run as the CLI runs them."""

    @property
    def n_samples(self) -> int: ...

    @property
    def budget(self) -> MemoryBudget | None:
        """The caches' byte budget (None: a loader without one, in tests)."""

    def summarize(
        self,
        decoder: TokenDecoder,
        notes: list[str],
        *,
        initial_wiring: str | None,
        input_paths: Sequence[str],
        load_s: float,
        first_sample: int,
        skipped: Sequence[tuple[int, str]],
        logged: LoggedFigure | None,
        sampling: SamplingSettings | None = None,
    ) -> Summary:
        """What the UI needs to know of the draft and the set; the presets and `--wiring`
        resolved (or why not); τ's first settings (`sampling`: at a temperature)."""

    def sample_data(self, i: int, decoder: TokenDecoder | None) -> SampleData:
        """Sample i's wiring-independent arrays: token texts, loss mask, slot norms."""

    def predict(self, i: int, wiring: WiringKey) -> SamplePredictions: ...

    def replay(self, i: int, wiring: WiringKey, serving: Serving) -> SampleAccept:
        """Sample i's serving replay under `serving` (at a temperature, with each round's odds
        under its rule; ServingError when the target it needs does not load)."""

    def trees(self, i: int, wiring: WiringKey, spec: DraftSpec) -> SampleTrees:
        """The draft tree an engine builds at every row of sample i."""

    def compare(self, i: int, wiring: WiringKey, spec: DraftSpec) -> SampleComparison:
        """Sample i under the first draft (`wiring`) and the second (`open --compare`), both
        replayed under `spec` (InputError when there is none, or it does not load)."""

    def second_summary(self) -> Summary:
        """The second draft (`open --compare`) loaded, and its own summary (InputError when
        there is none, or it does not load)."""

    def target(self) -> TargetModel:
        """The target model, loaded once for τ at a temperature and the doctor there
        (ServingError when there is none or it does not load)."""

    def keep_warm(self, i: int) -> None:
        """Keep sample i's device tensors cached (best effort)."""

    def free_after_oom(self, e: BaseException) -> bool:
        """After an out-of-memory error, hand the allocator's cached blocks back; True if it
        was one."""
