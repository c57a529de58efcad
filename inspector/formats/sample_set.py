"""A sample set: the files of one set, read one at a time and validated, the recent ones cached
by bytes; the files that could not be used (`SkippedSample`) and what the usable ones hold that
skews their numbers (`SampleWarning`), each named once."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from inspector.cache import ByteLRU
from inspector.errors import InputError
from inspector.formats.samples import discover, load_sample, read_data_config, read_v2_rows
from inspector.sample import Sample, SlotInfo

DEFAULT_CACHE_BYTES = 2**30  # loaded samples kept when no memory budget says otherwise


def check_width(sample: Sample, width: int, slots: Sequence[int] | None = None) -> None:
    """InputError naming the slot when one of `slots` (default: all) is not `width` wide: the
    draft's fc takes slots of its target_hidden_size."""
    for k in range(len(sample.slots)) if slots is None else slots:
        got = sample.slots[k].shape[-1]
        if got != width:
            raise InputError(
                sample.path,
                f"hidden_states[{k}]",
                f"width {got} but the draft's fc expects target_hidden_size {width}: samples "
                "of another model? capture them from the draft's target (eagle-inspect capture "
                "TARGET PROMPTS --draft CKPT)",
            )


@dataclass(frozen=True)
class SampleWarning:
    """Something a usable sample holds that skews its numbers (NaN in a slot, a saturated
    float16 capture, no loss mask), named once with its file."""

    index: int
    path: str
    warning: str

    def line(self) -> str:
        return f"{self.path}: {self.warning}"

    def to_dict(self) -> dict:
        return {"index": self.index, "path": self.path, "warning": self.warning}


@dataclass(frozen=True)
class SkippedSample:
    """A sample that could not be used: its file, the field at fault and why (an InputError's
    parts, so every view can name the file once, in one line)."""

    index: int | None
    path: str
    field: str | None
    reason: str

    @classmethod
    def from_error(cls, index: int | None, path: str, e: Exception) -> SkippedSample:
        return cls(
            index,
            getattr(e, "path", None) or path,
            getattr(e, "field", None),
            getattr(e, "message", None) or str(e),
        )

    def line(self) -> str:
        return ": ".join(p for p in (self.path, self.field, self.reason) if p)

    def to_dict(self) -> dict:
        return {"index": self.index, "path": self.path, "field": self.field, "reason": self.reason}


class SampleSet:
    """An ordered list of sample files, loaded one at a time, the recent ones kept in a cache
    bounded by bytes (`cache_bytes`; a 32K-token sample with four 7168-wide bf16 slots is ~2 GB,
    so an entry count would not bound anything).

    A file that fails to load is recorded once in `skipped` (later reads re-raise the same
    error without reading the file again); the slot layout comes from the first file that loads
    (only its layout is kept, not its tensors), and a set where none loads is an InputError.
    """

    def __init__(
        self,
        spec: str | Path | Sequence[str | Path],
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        *,
        vocab_size: int | None = None,
        hidden_size: int | None = None,
        num_layers: int | None = None,
    ) -> None:
        self.files = discover(spec)
        self.vocab_size = vocab_size
        # The draft's target_hidden_size, when known: every slot must have it (otherwise the
        # first usable sample's width is the reference).
        self.hidden_size = hidden_size
        # num_layers: the target's layer count (from --target), which can decide the convention
        # of data_config.json's layer ids when the file does not.
        self.layer_ids, self.data_config = read_data_config(
            self.files[0], num_layers=num_layers, layers_from="the target's config.json"
        )
        self._v2_rows = None
        if self.files[0].suffix == ".safetensors":
            self._v2_rows = read_v2_rows(self.files[0].parent)
        self._cache: ByteLRU[int, Sample] = ByteLRU(cache_bytes)
        self._first: int | None = None
        self._layout: tuple[list[SlotInfo], str] | None = None
        self._shape: tuple[int, int] | None = None  # slots and width of the first usable sample
        self._failed: dict[int, InputError] = {}
        self._warned: dict[int, list[str]] = {}  # what loading each sample noticed
        self._searching = False  # first_index is reading files in order
        self.cuts: Mapping[int, int] = {}  # sample index -> tokens read (see `cut`)

    @property
    def cache_bytes(self) -> int:
        """The most bytes of loaded samples kept (the evaluator sets its budget's share)."""
        return self._cache.max_bytes

    @cache_bytes.setter
    def cache_bytes(self, value: int) -> None:
        self._cache.max_bytes = value

    @property
    def cached_bytes(self) -> int:
        return self._cache.bytes

    def __len__(self) -> int:
        return len(self.files)

    def __iter__(self) -> Iterator[Sample]:
        for i in range(len(self)):
            yield self[i]

    def cut(self, cuts: Mapping[int, int]) -> SampleSet:
        """A view of this set where sample i is its first cuts[i] tokens (others whole). It
        shares the files, the loaded-sample cache and the failures with this set."""
        view = copy.copy(self)
        view.cuts = dict(cuts)
        return view

    def __getitem__(self, i: int) -> Sample:
        sample = self._load(i)
        n = self.cuts.get(i)
        return sample if n is None else sample.prefix(n)

    def _load(self, i: int) -> Sample:
        if i < 0 or i >= len(self.files):
            raise IndexError(i)
        if i in self._failed:
            raise self._failed[i]
        cached = self._cache.get(i)
        if cached is not None:
            return cached
        if self._first is None and i > 0 and not self._searching:
            self.first_index  # noqa: B018 - the layout every other sample must match
            if i in self._failed:
                raise self._failed[i]
            cached = self._cache.get(i)
            if cached is not None:
                return cached
        try:
            sample = load_sample(
                self.files[i], self.layer_ids, v2_rows=self._v2_rows, vocab_size=self.vocab_size
            )
            if self.hidden_size is not None:
                check_width(sample, self.hidden_size)
            if self._shape is not None:
                self._check_shape(sample)
        except InputError as e:
            self._failed[i] = e
            raise
        if sample.warnings:
            self._warned[i] = list(sample.warnings)
        return self._cache.put(i, sample)

    def _check_shape(self, sample: Sample) -> None:
        n, width = len(sample.slots), int(sample.slots[0].shape[1])
        if (n, width) != self._shape:
            n0, w0 = self._shape  # type: ignore[misc]
            raise InputError(
                sample.path,
                "hidden_states",
                f"{n} slots of width {width}; the set's first usable sample has {n0} of width {w0}",
            )

    @property
    def warnings(self) -> list[SampleWarning]:
        """What loading the samples read so far noticed (NaN or Inf in a slot, float16
        saturation, a missing loss mask), in file order, each once."""
        return [
            SampleWarning(i, str(self.files[i]), w)
            for i, ws in sorted(self._warned.items())
            for w in ws
        ]

    def forget(self, i: int) -> None:
        """Drop sample `i` from the cache (a one-pass reader is done with it)."""
        self._cache.pop(i)

    @property
    def skipped(self) -> list[SkippedSample]:
        """The files that failed to load so far, in file order, each once."""
        return [
            SkippedSample(i, str(self.files[i]), e.field, e.message)
            for i, e in sorted(self._failed.items())
        ]

    @property
    def first_index(self) -> int:
        """The index of the first sample that loads; InputError when none does."""
        if self._first is None:
            self._searching = True
            try:
                for i in range(len(self.files)):
                    try:
                        sample = self[i]
                    except InputError:
                        continue
                    self._first, self._layout = i, (sample.slot_info, sample.format)
                    self._shape = (len(sample.slots), int(sample.slots[0].shape[1]))
                    break
            finally:
                self._searching = False
            if self._first is None:
                e = self._failed[0]
                n = len(self.files)
                more = f"; none of the {n} sample files is usable" if n > 1 else ""
                raise InputError(e.path, e.field, e.message + more)
        return self._first

    @property
    def first(self) -> Sample:
        """The first sample that loads (read again if the cache has let it go)."""
        return self[self.first_index]

    @property
    def format(self) -> str:
        return self._first_layout()[1]

    @property
    def slot_info(self) -> list[SlotInfo]:
        return self._first_layout()[0]

    def _first_layout(self) -> tuple[list[SlotInfo], str]:
        self.first_index  # noqa: B018 - finds the first usable sample and keeps its layout
        assert self._layout is not None
        return self._layout
