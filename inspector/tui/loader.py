"""How the app loads its inputs on the device thread: the evaluator exactly as the CLI builds it,
the tokenizer, and the first sample that loads (a corrupt first file must not keep the app from
showing the others). No Textual here; torch is imported inside the loader, on the device thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from inspector.formats.tokenizer import TokenDecoder
    from inspector.sample import Sample, SlotInfo
    from inspector.session import Inputs


@dataclass
class LoadResult:
    """What a loader returns: the evaluator, the token decoder, notes for the user, and the
    samples that could not be loaded before the first usable one."""

    ev: Any  # Evaluator
    decoder: TokenDecoder
    notes: list[str] = field(default_factory=list)
    first_sample: int = 0
    skipped: list[tuple[int, str]] = field(default_factory=list)


Loader = Callable[[Callable[[str], None]], LoadResult]


def default_loader(
    inputs: Inputs,
    *,
    device: str = "auto",
    dtype: str = "auto",
    ttt_steps: int = 1,
    memory_budget: str | None = None,
) -> Loader:
    """A loader for the real inputs (`progress(text)` reports each stage)."""

    def load(progress: Callable[[str], None]) -> LoadResult:
        progress("importing torch")
        import torch

        leave_a_core_for_the_ui(torch, device)

        from inspector.session import load_decoder, load_evaluator

        progress(f"loading {inputs.checkpoint} onto {device}")
        ev = load_evaluator(
            inputs, device=device, dtype=dtype, ttt_steps=ttt_steps, memory_budget=memory_budget
        )
        progress(f"reading the first of {len(ev.samples)} samples")
        first, skipped = use_first_loadable(ev)
        decoder, notes = load_decoder(inputs)
        return LoadResult(ev, decoder, notes, first, skipped)

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


def use_first_loadable(ev: Any) -> tuple[int, list[tuple[int, str]]]:
    """Make the evaluator take its slot layout from the first sample that loads.

    A sample set whose `first` is its file 0 fails as a whole when that file is corrupt; it is
    then wrapped in `FirstLoadable`. A set that already skips a bad first file is left as is.
    """
    from inspector.errors import InputError

    first, skipped = first_loadable(ev.samples)
    if first > 0:
        try:
            ev.samples.first  # noqa: B018 - does the set find its first usable sample itself?
        except InputError:
            ev.samples = FirstLoadable(ev.samples, first)
    return first, skipped


class FirstLoadable:
    """A sample set whose slot layout and format come from sample `first` instead of file 0;
    everything else is the wrapped set's (a bad file still raises its InputError when read)."""

    def __init__(self, samples: Any, first: int) -> None:
        self.samples = samples
        self.first_index = first

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> Sample:
        return self.samples[i]

    def __iter__(self) -> Iterator[Sample]:
        return iter(self.samples)

    @property
    def first(self) -> Sample:
        return self.samples[self.first_index]

    @property
    def slot_info(self) -> list[SlotInfo]:
        return self.first.slot_info

    @property
    def format(self) -> str:
        return self.first.format

    def __getattr__(self, name: str) -> Any:  # files, layer_ids, data_config, ...
        return getattr(self.samples, name)


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
