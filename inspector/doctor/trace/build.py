"""The trace the doctor runs: the trained path of a loaded draft and the path of each engine
that serves it, over one sample (`doctor --trace N`).

The trained path runs the wiring the draft was trained on (the doctor's finding, else the
configured one) in the dtype the inspector computes in; each engine path runs what that engine
runs (`paths`), in the dtype the checkpoint stores (what an engine's `dtype auto` loads).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from inspector.doctor.checks.block_checks import REFERENCE
from inspector.doctor.trace.paths import (
    TracePath,
    block_engine_paths,
    eagle3_engine_path,
    trained_path,
    with_dtype,
)
from inspector.doctor.trace.stage_compare import Trace, trace
from inspector.draft import Draft
from inspector.engines import SERVING, Engine
from inspector.errors import InputError, setting_field
from inspector.sample import Sample, SlotInfo
from inspector.wiring import Wiring

if TYPE_CHECKING:
    from inspector.doctor.finding import Finding
    from inspector.doctor.report import DoctorReport
    from inspector.evaluate import Evaluator

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
    stored = _stored(base, draft.stored_dtype)  # one copy of the weights for every engine
    paths = [
        eagle3_engine_path(stored, e, infos, num_layers=num_layers, target=target)
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
    stored = _stored(base, draft.stored_dtype)  # one copy of the weights for every engine
    paths = block_engine_paths(stored, config, num_layers, infos, engines)
    return trace(base, paths, sample, sample_index=sample_index, rows=rows)


def report_trace_finding(
    ev: Evaluator,
    report: DoctorReport,
    index: int,
    engines: Sequence[str] | None = None,
    target: Path | None = None,
) -> Finding:
    """The doctor's trace finding: sample `index` of the evaluator's set over the trained wiring
    the report found (else the configured one), against each engine named (else every one),
    with the target's layer count and class as the samples and `target` tell them."""
    from inspector.doctor.trace.finding import trace_finding
    from inspector.engines import engine_id
    from inspector.formats.layer_convention import target_layer_count
    from inspector.formats.target_config import data_config_target, read_target_class
    from inspector.wiring import configured_layers, train_wiring

    draft = ev.draft
    infos = ev.slot_info
    index = pick_sample(ev.samples.files[0] if ev.samples.files else None, index, len(ev.samples))
    if report.best_wiring:
        trained = Wiring(tuple(report.best_wiring))
    else:
        cfg = draft.config
        layers = configured_layers(cfg.aux_layer_ids, cfg.aux_layer_convention)
        trained = train_wiring(infos, cfg.num_fc_blocks, layers)
    num_layers = next((s.hf_index for s in infos if s.verifier and not s.post_norm), None)
    if num_layers is None and target is not None:
        num_layers = target_layer_count(target)
    klass = read_target_class(target) or data_config_target(ev.samples.data_config)
    trace = eagle3_trace(
        draft,
        ev.samples[index],
        infos,
        trained,
        sample_index=index,
        engines=[engine_id(e) for e in engines] if engines else None,
        num_layers=num_layers,
        target=klass,
        position_offset=ev.position_offset,
    )
    return trace_finding(trace)
