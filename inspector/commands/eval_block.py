"""`eagle-inspect eval` on a block draft (DFlash, DFlash2): accuracy by position in the block
and the block accept length per wiring, as a table or one JSON document
(`evaluate.block_eval` computes it)."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console
from rich.table import Table

from inspector.commands.common import LazySamples, open_block_draft
from inspector.commands.output import report_table, stdout_console, write_json
from inspector.errors import InputError
from inspector.formatting import pct
from inspector.progress import progress_bar
from inspector.wiring import parse_wiring, preset_name


def run_block_eval(args: argparse.Namespace) -> int:
    from inspector.evaluate.block_eval import COUNTED_BY, evaluate_blocks

    err = Console(stderr=True)
    inputs, draft, sample_set = open_block_draft(args, err, dspark=True)
    block = draft.config.block
    assert block is not None
    infos = sample_set.slot_info
    texts = args.wiring or ["train"]
    held = {s.hf_index for s in infos if s.hf_index is not None and not s.post_norm}
    missing = [k for k in block.hf_layer_ids if k not in held]
    if missing and any(preset_name(t) for t in texts):
        # the presets' positional fallback would feed whatever slots come first: not for a
        # draft whose config names its layers
        raise InputError(
            inputs.samples[0] if inputs.samples else None,
            "--wiring",
            f"the samples hold HF {sorted(held)}, not the configured layers HF {missing} "
            f"(target_layer_ids {list(block.layer_ids)} + 1): capture them (capture --layers) "
            "or name the slots with --wiring",
        )
    wirings = [
        (preset_name(t), parse_wiring(t, infos, draft.config.num_fc_blocks, block.hf_layer_ids))
        for t in texts
    ]
    n = len(sample_set) if args.limit is None else args.limit
    # read one sample at a time: a block draft's sample holds every captured layer
    samples = LazySamples(sample_set, n, err)
    with progress_bar("evaluating", err) as advance:
        report = evaluate_blocks(
            draft,
            samples,
            wirings,
            positions=bool(args.positions),
            progress=advance,
            slot_info=infos,
        )
    if args.json:
        write_json(report.to_dict())
        return 0
    out = stdout_console(None if sys.stdout.isatty() else 200)
    out.print(render_block_report(report, COUNTED_BY))
    if args.per_sample:
        out.print(render_block_samples(report))
    return 0


def render_block_samples(report) -> Table:
    """One row a sample: its blocks, and per wiring the block accuracy and vLLM's accept length."""
    table = report_table("per sample", "sample", "blocks")
    for w in report.wirings:
        name = f"{w.name} {w.label}" if w.name else w.label
        table.add_column(f"{name}\nacc", justify="right")
        table.add_column("accept length", justify="right")
    rows = zip(*(w.per_sample for w in report.wirings), strict=True)
    for per_wiring in rows:
        first = per_wiring[0]
        row = [str(first["sample"]), str(first["blocks"])]
        for r in per_wiring:
            tau = r["accept_length_vllm"]
            row += [pct(r["accuracy"]), "-" if tau is None else f"{tau:.2f}"]
        table.add_row(*row)
    return table


def render_block_report(report, counted_by) -> Table:
    """Accuracy and mean p by position in the block, one column pair per wiring; the block
    accept length as each engine counts it below."""
    from inspector.engines import engine

    drafts = report.drafts or report.block_size - 1
    table = report_table(
        f"{report.draft}: {report.family}, block {report.block_size} "
        f"({drafts} drafts a round), {report.samples} samples"
    )
    table.add_column("block position", justify="right")
    for w in report.wirings:
        name = f"{w.name} {w.label}" if w.name else w.label
        table.add_column(f"{name}\nacc", justify="right")
        table.add_column("mean p", justify="right")
    for k in range(drafts):
        row = [str(k + 1)]
        for w in report.wirings:
            c = int(w.counts[k])
            row += [pct(w.accuracy[k]), f"{w.p_sum[k] / c:.3f}" if c else "-"]
        table.add_row(*row)
    table.add_section()
    row = ["all"]
    for w in report.wirings:
        row += [pct(w.mean_accuracy), ""]
    table.add_row(*row)
    for e in counted_by:
        row = [f"accept length ({engine(e).display})"]
        for w in report.wirings:
            st = w.stats[e]
            value = st.accept_length
            text = "-" if value is None else f"{value:.2f}" + ("+" if st.is_bound else "")
            row += [text, f"{st.rounds} rounds"]
        table.add_row(*row)
    return table
