"""The trace the doctor runs: the trained path of a loaded draft and the path of each engine
that serves it, over one sample (`doctor --trace N`).

The trained path runs the wiring the draft was trained on (the doctor's finding, else the
configured one) in the dtype the inspector computes in; each engine path runs what that engine
runs (`paths`), in the dtype the checkpoint stores (what an engine's `dtype auto` loads).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from inspector.doctor.checks.block_checks import REFERENCE
from inspector.doctor.trace.compare import Trace, trace
from inspector.doctor.trace.paths import (
    TracePath,
    block_engine_paths,
    eagle3_engine_path,
    trained_path,
    with_dtype,
)
from inspector.draft import Draft
from inspector.engines import SERVING, Engine
from inspector.errors import InputError, setting_field
from inspector.sample import Sample, SlotInfo
from inspector.wiring import Wiring

ROWS = 64  # rows (EAGLE-3) or blocks (block drafts) a trace runs: stages are rows x width each


def _stored(path: TracePath, stored: torch.dtype | None) -> TracePath:
    if stored is None:
        return path
    return with_dtype(path, stored, "as the checkpoint stores it")


def pick_sample(where: object, index: int, count: int) -> int:
    """`index` checked against the `count` samples of the set at `where`."""
    if not 0 <= index < count:
        raise InputError(
            where,
            setting_field("trace"),
            f"sample {index} is not in the set ({count} samples: 0..{count - 1})",
        )
    return index


def eagle3_trace(
    draft: Draft,
    sample: Sample,
    infos: Sequence[SlotInfo],
    trained: Wiring,
    *,
    sample_index: int = 0,
    engines: Sequence[Engine] | None = None,
    num_layers: int | None = None,
    target: object = None,
    position_offset: int = 1,
    rows: int = ROWS,
) -> Trace:
    base = trained_path(draft, trained, draft.layout)
    paths = [
        _stored(
            eagle3_engine_path(base, e, infos, num_layers=num_layers, target=target),
            draft.stored_dtype,
        )
        for e in (engines or SERVING)
    ]
    return trace(
        base, paths, sample, sample_index=sample_index, rows=rows, position_offset=position_offset
    )


def block_trace(
    draft: Draft,
    sample: Sample,
    infos: Sequence[SlotInfo],
    trained: Wiring,
    config: Mapping,
    num_layers: int,
    *,
    sample_index: int = 0,
    engines: Sequence[Engine] | None = None,
    rows: int = ROWS,
) -> Trace:
    block = draft.config.block
    assert block is not None
    base = trained_path(draft, trained, REFERENCE)
    paths = [
        _stored(p, draft.stored_dtype)
        for p in block_engine_paths(base, config, num_layers, infos, engines)
    ]
    return trace(base, paths, sample, sample_index=sample_index, rows=rows)
