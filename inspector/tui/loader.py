"""How the app loads its inputs on the device thread: the evaluator exactly as the CLI builds it,
the tokenizer, and the first sample that loads (a corrupt first file must not keep the app from
showing the others). No Textual here; torch is imported inside the loader, on the device thread.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from inspector.evaluate import Evaluator
    from inspector.formats.tokenizer import TokenDecoder
    from inspector.serving.sampling_settings import SamplingSettings
    from inspector.session import Inputs
    from inspector.tui.backend import Backend
    from inspector.tui.summary import LoggedFigure


@dataclass
class LoadResult:
    """What a loader returns: the evaluator, the token decoder, notes for the user, and the
    samples that could not be loaded before the first usable one; the target folder a
    temperature's τ loads, and the sampling τ starts at."""

    ev: Evaluator
    decoder: TokenDecoder
    notes: list[str] = field(default_factory=list)
    first_sample: int = 0
    skipped: list[tuple[int, str]] = field(default_factory=list)
    logged: LoggedFigure | None = None  # what an engine logged (--engine-log)
    target: str | None = None
    target_dtype: str = "auto"
    sampling: SamplingSettings | None = None
    compare: tuple[str, str] | None = None  # `--compare CKPT_B` and B's wiring

    def backend(self) -> Backend:
        """The app's view of the evaluator (device thread, torch loaded). Made from `ev` when
        asked, not in the loader: tests wrap `ev` after the loader returns."""
        from inspector.tui.evaluator_backend import EvaluatorBackend
        from inspector.tui.second_draft import SecondDraft

        second = None
        if self.compare is not None:
            second = SecondDraft(*self.compare, target=self.target, dtype=self.target_dtype)
        return EvaluatorBackend(self.ev, self.target, self.target_dtype, second)


LoadStage = Callable[[str], None]  # a loader reports each stage it enters with one line of text
Loader = Callable[[LoadStage], LoadResult]


def default_loader(
    inputs: Inputs,
    *,
    device: str = "auto",
    dtype: str = "auto",
    ttt_steps: int = 1,
    memory_budget: str | None = None,
    engine_log: str | None = None,
    sampling: SamplingSettings | None = None,
    compare: tuple[str, str] | None = None,
) -> Loader:
    """A loader for the real inputs (`stage(text)` reports each stage); `engine_log`: a file
    of what an engine logged (`reconcile`'s formats), shown beside τ; `sampling`: τ starts at
    this temperature (its target: the inputs' --target); `compare`: a second draft and its
    wiring, compared with the first on the shown sample (`b`)."""

    def load(stage: LoadStage) -> LoadResult:
        stage("importing torch")
        import torch

        leave_a_core_for_the_ui(torch, device)

        from inspector.session import load_decoder, load_evaluator

        stage(f"loading {inputs.checkpoint} onto {device}")
        ev = load_evaluator(
            inputs, device=device, dtype=dtype, ttt_steps=ttt_steps, memory_budget=memory_budget
        )
        parallel = ev.draft.config.parallel
        if parallel is not None and ev.ttt_steps < parallel.num_depths:
            # P-EAGLE: every depth is one TTT step of the one forward, and τ's chain is read
            # from them (the sequential tree path refuses a parallel draft)
            ev.ttt_steps = parallel.num_depths
        stage(f"reading the first of {len(ev.samples)} samples")
        first, skipped = first_loadable(ev.samples)
        decoder, notes = load_decoder(inputs)
        logged = None
        if engine_log is not None:
            from inspector.formats.engine_log import read_engine_log
            from inspector.tui.summary import LoggedFigure

            logged = LoggedFigure.of(read_engine_log(engine_log))
        return LoadResult(
            ev,
            decoder,
            [*inputs.notes, *notes],
            first,
            skipped,
            logged,
            target=None if inputs.target is None else str(inputs.target),
            target_dtype=dtype,
            sampling=sampling,
            compare=compare,
        )

    return load


def first_loadable(samples: Any) -> tuple[int, list[tuple[int, str]]]:
    """The index of the first sample that loads and (index, error) of each one before it;
    InputError (naming the first file's fault) when none loads."""
    from inspector.errors import InputError

    skipped: list[tuple[int, str]] = []
    first_error: InputError | None = None
    for i in range(len(samples)):
        try:
            samples[i]
        except InputError as e:
            first_error = first_error or e
            skipped.append((i, str(e)))
            continue
        return i, skipped
    assert first_error is not None  # a SampleSet has at least one file
    n = len(samples)
    more = f"; none of the {n} sample files is usable" if n > 1 else ""
    raise InputError(first_error.path, first_error.field, first_error.message + more)


def leave_a_core_for_the_ui(torch: Any, device: str) -> None:
    """On CPU, run torch on all cores but one, so the UI thread keeps a core of its own.

    torch's intra-op threads spin while they wait; with as many of them as cores, the UI thread
    and every forward fight for the same cores and both slow down many times over (measured on
    2 cores: 0.34 s instead of 5 ms per demo sample). OMP_NUM_THREADS, when set, wins.
    """
    import os

    if os.environ.get("OMP_NUM_THREADS") or str(device).startswith("cuda"):
        return
    if str(device) == "auto" and torch.cuda.is_available():
        return
    cores = os.cpu_count() or 1
    if cores > 1 and torch.get_num_threads() >= cores:
        torch.set_num_threads(cores - 1)
