"""`eagle-inspect accept` on a block draft (DFlash, DFlash2): the block accept length each engine
logs, replayed from samples, for the configured wiring, the one the weights were trained on
(the doctor's search, where it differs) and the wiring each reader of the config feeds.

A round verifies the block's drafts and accepts their matching prefix; `evaluate.block_eval`
walks the rounds (`metrics.rounds.walk`) as each engine counts them. Which wirings: the
doctor's search (`doctor.wiring.block_search.search_from_config`) and the readers' feeds
(`doctor.wiring.block_feeds`), only the readers of the counted engines (`--engine`).

`--fail-under` checks the first counted engine's accept length on the rows that engine's own
readers feed (`BlockPlan.gated`; where it feeds none, the configured row), or on every wiring
named with `--wiring`; the searched wiring and other readers' feeds are shown, never gated.

The samples are read one at a time (`LazySamples`): a block draft's sample holds every layer."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console
from rich.table import Table

from inspector.commands.common import LazySamples, open_block_draft
from inspector.commands.output import report_table, safe, stdout_console, write_json
from inspector.engines import Engine
from inspector.errors import InputError
from inspector.formatting import fmt_float, pct
from inspector.progress import progress_bar

# the samples the wiring search reads (the doctor's default --samples)
SEARCH_SAMPLES = 8


def refuse_replay_flags(args: argparse.Namespace) -> None:
    """The settings a block draft's replay does not take, each one line (exit 2)."""
    checks = [
        ("--live", getattr(args, "live", False), "a live loop"),
        ("--temperature", getattr(args, "temperature", 0.0) > 0, "sampling"),
        ("--topk", getattr(args, "topk", 1) != 1, "a tree (a block draft drafts one chain)"),
        ("--profile", getattr(args, "profile", None), "an acceptance profile"),
        ("--p-min", getattr(args, "p_min", 0.0) or getattr(args, "n_min", 0), "an early stop"),
        ("--kv", getattr(args, "kv", "exact") != "exact", "a tree's draft KV"),
        (
            "--sglang-overlap",
            getattr(args, "sglang_overlap", "on") == "off",
            f"{Engine.SGLANG.display}'s count without its overlap round",
        ),
    ]
    for flag, given, what in checks:
        if given:
            raise InputError(
                None, flag, f"{what} is not replayed on a block draft yet: drop {flag}"
            )
    steps, tokens = getattr(args, "steps", None), getattr(args, "draft_tokens", None)
    if tokens is not None and steps is not None and tokens != steps + 1:
        raise InputError(None, "--draft-tokens", "a block draft's round verifies steps + 1")


def counting_engines(args: argparse.Namespace, family: str):
    """Whose counts the report gives: --engine's, else vLLM's and SGLang's (`COUNTED_BY`); an
    engine none of whose readers reads this kind of draft is refused."""
    from inspector.engines import all_engines, engine, parse_engine
    from inspector.evaluate.block_eval import COUNTED_BY

    if args.engine is None:
        return tuple(COUNTED_BY)
    e = parse_engine(args.engine, True)
    if not any(family in r.drafts for r in engine(e).readers):
        readers = [x.id.value for x in all_engines() if any(family in r.drafts for r in x.readers)]
        raise InputError(
            None,
            "--engine",
            f"{engine(e).label} reads no {family} draft: {' or '.join(readers) or 'none does'}",
        )
    return (e,)


def run_block_accept(args: argparse.Namespace) -> int:
    from inspector.commands.gates import gate_exit
    from inspector.doctor.wiring.block_feeds import plan_block_wirings
    from inspector.evaluate.block_eval import evaluate_blocks
    from inspector.formats.block_config import block_draft_family
    from inspector.wiring import parse_wiring, preset_name

    refuse_replay_flags(args)
    engines = counting_engines(args, block_draft_family(args.checkpoint) or "dflash")
    err = Console(stderr=True)
    inputs, draft, sample_set = open_block_draft(args, err, dspark=True)
    block = draft.config.block
    assert block is not None
    # K drafts a round: K rows where the anchor's row drafts too (DSpark), else K + 1
    extra = 0 if block.anchor_drafts else 1
    width = args.steps + extra if args.steps else block.block_size
    if width != block.block_size:
        rows = "the anchor's first" if block.anchor_drafts else f"the anchor and {width - 1} masks"
        err.print(
            f"note: num_speculative_tokens {args.steps}: each round runs a block of {width} rows "
            f"({rows}); the draft was trained on blocks of {block.block_size}",
            highlight=False,
            soft_wrap=True,
        )
    n = len(sample_set) if args.limit is None else args.limit
    samples = LazySamples(sample_set, n, err)
    infos = sample_set.slot_info
    n_blocks = draft.config.num_fc_blocks
    plan = None
    if args.wiring:
        wirings = [
            (preset_name(t), parse_wiring(t, infos, n_blocks, block.hf_layer_ids))
            for t in args.wiring
        ]
        gated = [name for name, _ in wirings]
    else:
        head = [x for _, x in samples.head(SEARCH_SAMPLES)]
        plan = plan_block_wirings(draft, head, inputs.target, engines)
        del head
        for line in plan.notes:
            err.print(f"note: {safe(line)}", highlight=False, soft_wrap=True)
        if not plan.held:
            raise InputError(
                inputs.samples[0] if inputs.samples else None,
                "--wiring",
                "the samples hold none of the wirings to replay: name the slots with --wiring",
            )
        wirings = [(row.name, w) for row, w in plan.held]
        gated = plan.gated(engines[0])
    with progress_bar("replaying", err) as advance:
        report = evaluate_blocks(
            draft,
            samples,
            wirings,
            progress=advance,
            engines=engines,
            width=width,
            slot_info=infos,
        )
    fed_by = [list(row.fed_by) for row, _ in plan.held] if plan else [[] for _ in wirings]
    if args.json:
        doc = report.to_dict()
        doc["block_size"] = block.block_size
        doc["drafts_per_round"] = report.drafts
        doc["engines"] = [e.value for e in engines]
        doc["gated"] = gated
        for w, by in zip(doc["wirings"], fed_by, strict=True):
            w["fed_by"] = by
        if plan is not None:
            doc["search"] = plan.search.to_dict() if plan.search is not None else None
            doc["feeds"] = [f.to_dict() for f in plan.feeds]
        write_json(doc)
    else:
        out = stdout_console(None if sys.stdout.isatty() else 200)
        out.print(render_block_accept(report, engines, fed_by))
    return gate_exit(err, block_accept_gate, (report, engines[0], gated), args.fail_under)


def block_accept_gate(report_engine_gated, threshold: float) -> str | None:
    """`--fail-under`: the first gated wiring (`gated`: their names) whose accept length, as the
    first engine counts it, is below `threshold` (`gates.accept_gate`'s line)."""
    report, first, gated = report_engine_gated
    for w in report.wirings:
        if w.name not in gated:
            continue
        al = w.stats[first].accept_length
        if al is None or al < threshold:
            shown = "none (no rounds)" if al is None else fmt_float(al, 4)
            name = f"{w.name} {w.label}" if w.name else w.label
            return f"fail-under: wiring {name} has accept length {shown}, below {threshold:g}"
    return None


def render_block_accept(report, engines, fed_by) -> Table:
    """One row per wiring: the accept length as each engine counts it, with its rounds; the
    share of rounds accepting at least k drafts as the first engine counts them; who feeds it."""
    from inspector.engines import engine

    k = report.drafts or report.block_size - 1
    table = report_table(
        safe(
            f"{report.draft}: block accept length per round ({report.family}, {k} drafts a "
            f"round) on {report.samples} samples"
        )
    )
    table.add_column("wiring", no_wrap=True)
    table.add_column("fc <- layers", no_wrap=True)
    for e in engines:
        table.add_column(f"accept len\n{engine(e).display}", justify="right")
        table.add_column("rounds", justify="right")
    for j in range(k):
        table.add_column(f">={j + 1}", justify="right")
    table.add_column("accepted", justify="right")
    table.add_column("fed by")
    for w, by in zip(report.wirings, fed_by, strict=True):
        row = [safe(w.name or "custom"), safe(w.label)]
        for e in engines:
            st = w.stats[e]
            al = st.accept_length
            row += [
                "-" if al is None else fmt_float(al) + ("+" if st.is_bound else ""),
                f"{st.rounds:,}",
            ]
        first = w.stats[engines[0]]
        row += [pct(x) for x in first.per_depth]
        row += [f"{first.accepted:,}", safe(", ".join(by))]
        table.add_row(*row)
    overlap = [engine(e).display for e in engines if engine(e).overlap_round]
    after = (
        f"; {' and '.join(overlap)} count{'s' if len(overlap) == 1 else ''} one more round "
        "after each request's stop (an overlap round)"
        if overlap
        else ""
    )
    table.caption = (
        "accept len: 1 + accepted / rounds, pooled, as the engines log it; a round accepts the "
        "leading drafts of its block that match the target; + marks a lower bound (the samples "
        f"do not hold the target's continuation past a stop). >=k: the share of rounds "
        f"accepting at least k drafts ({engine(engines[0]).display}'s count){after}"
    )
    table.caption_justify = "left"
    return table
