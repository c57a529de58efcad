"""`eagle-inspect doctor` on a block draft (DFlash, DFlash2): the trained layers asked of the
weights, each engine's reading of the config, the block size, the mask token
(`doctor.checks.block_checks`), as the doctor's report."""

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
    from inspector.doctor.wiring.block_search import BlockScorer, search_block_wiring
    from inspector.engines import engine
    from inspector.formats.block_config import build_target_layer_ids
    from inspector.formats.layer_convention import target_layer_count

    started = time.perf_counter()
    inputs, draft, sample_set = open_block_draft(args, err)
    block = draft.config.block
    assert block is not None
    read = readable_samples(sample_set, args.n_samples, err)
    indices, samples = [i for i, _ in read], [x for _, x in read]
    scorer = BlockScorer(draft, samples)
    configured = tuple(block.hf_layer_ids)
    held = set(scorer.held)
    seeds: list[tuple[str, tuple[int, ...] | None]] = [("configured", configured)]
    num_layers = (
        (target_layer_count(inputs.target) if inputs.target else None)
        or block.num_target_layers
        or max(scorer.held)
    )
    try:  # the reference's default spread: what a draft trained without naming ids was fed
        spread = build_target_layer_ids(num_layers, draft.config.num_layers)
        seeds.append(("default spread", tuple(k + 1 for k in spread)))
    except ValueError:
        pass
    search = search_block_wiring(scorer, seeds)
    configured_score = scorer.score(configured) if held >= set(configured) else None
    raw = json.loads((Path(draft.path) / "config.json").read_text())
    findings = [
        wiring_finding(search, block, configured_score),
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
    return DoctorReport(
        best_wiring=(),
        wirings=[],
        findings=sort_findings(findings),
        serving_config=None,
        checkpoint=str(inputs.checkpoint),
        sample_indices=indices,
        seconds={"block_doctor": round(time.perf_counter() - started, 2)},
    )
