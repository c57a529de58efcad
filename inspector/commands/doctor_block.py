"""`eagle-inspect doctor` on a block draft (DFlash, DFlash2): the trained layers asked of the
weights, each engine's reading of the config, the block size, the mask token
(`doctor.checks.block_checks`), as the doctor's report. With --target (and not --no-capture) the
layers the samples lack are captured over its samples first, so the search runs over every
layer (`doctor.wiring.block_capture`)."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from rich.console import Console

from inspector.commands.common import open_block_draft, readable_samples


def block_doctor_report(args: argparse.Namespace, err: Console):
    """The DoctorReport of a block draft over the first --samples samples."""
    from inspector.doctor.checks.block_checks import (
        block_size_finding,
        decided_layers,
        engine_finding,
        mask_finding,
        wiring_finding,
    )
    from inspector.doctor.finding import sort_findings
    from inspector.doctor.report import DoctorReport
    from inspector.doctor.wiring.block_feeds import target_layers
    from inspector.doctor.wiring.block_search import search_from_config
    from inspector.engines import engine
    from inspector.formats.block_speculators import reader_view

    started = time.perf_counter()
    inputs, draft, sample_set = open_block_draft(args, err, dspark=True)
    block = draft.config.block
    assert block is not None
    read = readable_samples(sample_set, args.n_samples, err)
    indices, samples = [i for i, _ in read], [x for _, x in read]
    num_layers = target_layers(inputs.target, block, samples)
    captured, capture = None, None
    if inputs.target is not None and not getattr(args, "no_capture", False):
        from inspector.doctor.wiring.block_capture import capture_every_layer

        captured, capture, notes = capture_every_layer(
            inputs.target, samples, block.block_size, draft.device
        )
        for note in notes:
            err.print(f"note: {note}", highlight=False, soft_wrap=True)
    search, configured_score = search_from_config(draft, captured or samples, num_layers)
    # speculators' layout as the engines read it once their speculators loader flattened it
    raw = reader_view(json.loads((Path(draft.path) / "config.json").read_text()))
    findings = [
        wiring_finding(search, block, configured_score, capture),
        engine_finding(
            raw,
            block.family,
            num_layers,
            decided_layers(search, block, configured_score),
            block,
            [engine(e).id for e in args.engine] if getattr(args, "engine", None) else None,
            certain=configured_score is not None,
        ),
        block_size_finding(block, getattr(args, "steps", None)),
        mask_finding(draft),
    ]
    if getattr(args, "trace", None) is not None:
        by_index = dict(zip(indices, captured or [], strict=False))
        findings.append(
            _trace_finding(
                args, sample_set, draft, raw, num_layers, search, configured_score, by_index
            )
        )
    return DoctorReport(
        best_wiring=(),
        wirings=[],
        findings=sort_findings(findings),
        serving_config=None,
        checkpoint=str(inputs.checkpoint),
        sample_indices=indices,
        seconds={"block_doctor": round(time.perf_counter() - started, 2)},
    )


def _trace_finding(args, sample_set, draft, raw, num_layers, search, configured_score, captured):
    """The train/serve trace of sample --trace over the layers the weights were trained on
    (`doctor.trace`), against each engine that reads this kind of draft (--engine: those);
    `captured`: sample index -> that sample with every layer (its first tokens), where the
    doctor captured it."""
    from inspector.doctor.checks.block_checks import decided_layers
    from inspector.doctor.trace.build import block_trace, pick_sample
    from inspector.doctor.trace.finding import trace_finding
    from inspector.engines import engine_id
    from inspector.wiring import layers_wiring

    block = draft.config.block
    index = pick_sample(
        sample_set.files[0] if sample_set.files else None, args.trace, len(sample_set)
    )
    sample = captured.get(index) or sample_set[index]
    infos = sample.slot_info
    trained = layers_wiring(decided_layers(search, block, configured_score), infos)
    if trained is None:
        trained = layers_wiring(block.hf_layer_ids, infos)
    assert trained is not None  # the search ran over the layers these samples hold
    engines = [engine_id(e) for e in args.engine] if getattr(args, "engine", None) else None
    trace = block_trace(
        draft, sample, infos, trained, raw, num_layers, sample_index=index, engines=engines
    )
    return trace_finding(trace)
