"""`eagle-inspect accept`: the accept length an engine would log, replayed from samples (or
measured by a live loop against the target), per wiring, as tables or one JSON document."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from inspector.commands.common import (
    as_engine_runs_it,
    open_evaluator,
    print_skips,
    target_facts,
    warn_config_wiring,
    warn_slot_faults,
    wirings_and_names,
)
from inspector.commands.gates import accept_gate, gate_exit
from inspector.commands.output import report_table, safe, stdout_console, write_json
from inspector.engines import Engine
from inspector.errors import InputError
from inspector.formatting import fmt_float, pct
from inspector.progress import progress_bar

# the engines' names from the registry (a rename is one edit in inspector/engines/)
_SGLANG, _VLLM = Engine.SGLANG.display, Engine.VLLM.display

# Above this share of generated positions whose token is not the target's argmax, the replay
# measures the data more than what the target would emit: say so.
OFF_TARGET_NOTE = 0.02


def spec_from_args(args: argparse.Namespace):
    from inspector.serving.spec import DEFAULT_STEPS, DraftSpec

    p_min, n_min = getattr(args, "p_min", 0.0), getattr(args, "n_min", 0)
    if (p_min or n_min) and not getattr(args, "live", False):
        # the replay drafts from saved predictions, without the draft's probabilities
        raise InputError(
            None, "--p-min", f"{Engine.LLAMACPP.display}'s early stop runs in the live loop: --live"
        )
    return DraftSpec(
        args.steps or DEFAULT_STEPS,
        args.topk,
        args.draft_tokens,
        kv=args.kv,
        p_min=p_min,
        n_min=n_min,
    )


def run_accept(args: argparse.Namespace) -> int:
    from inspector.distributed import init_from_env
    from inspector.engines import parse_engine
    from inspector.formats.block_config import block_draft_family

    block = block_draft_family(args.checkpoint) is not None
    if block and not args.live:
        from inspector.commands.accept_block import run_block_accept

        return run_block_accept(args)
    err = Console(stderr=True)
    if block:  # the block live loop (`serving.live_block`), reported as the one below
        from inspector.commands.accept_block_live import run_block_live

        report, engine = run_block_live(args, err)
    elif args.live:
        spec = spec_from_args(args)
        engine = parse_engine(args.engine, spec.is_chain)
        from inspector.commands.accept_live import run_live

        report = run_live(args, spec, err, engine)
    else:
        spec = spec_from_args(args)
        engine = parse_engine(args.engine, spec.is_chain)
        report, ev = _replay(args, spec, err, init_from_env, engine)
        if report is None:
            return 0
        if args.temperature > 0:
            _expect_at_temperature(args, report, ev, err)
    if engine.overlap_round and args.sglang_overlap == "off":
        report = report.without_overlap_rounds()
    print_skips(err, report)
    if args.profile:
        _write_profile(args, report, err)
    for line in honesty_notes(report):
        err.print(f"note: {safe(line)}", highlight=False, soft_wrap=True)
    if args.json:
        write_json(report.to_dict())
    else:
        out = stdout_console(None if sys.stdout.isatty() else 200)
        out.print(render_accept(report))
        if any(len(w.stats.buckets) > 1 for w in report.wirings):
            out.print(render_by_position(report))
    return gate_exit(err, accept_gate, report, args.fail_under)


def _write_profile(args, report, err) -> None:
    """The first wiring's acceptance profile to --profile (`serving.profile`)."""
    from inspector.serving.profile import profile_of, write_profile

    if not report.wirings:
        return
    wa = report.wirings[0]
    if args.live:
        dataset = str(args.prompts)
    elif args.samples:
        dataset = " ".join(map(str, args.samples))
    else:
        from inspector.demo_paths import demo_paths

        dataset = str(demo_paths().train_samples)
    osl = args.max_new if args.live else None
    path = write_profile(args.profile, profile_of(report, wa, dataset=dataset, osl=osl))
    err.print(
        f"wrote the acceptance profile of {safe(wa.label)} to {safe(str(path))}",
        highlight=False,
        soft_wrap=True,
    )


def _replay(args, spec, err, init_from_env, engine):
    from inspector.distributed import gather_accept
    from inspector.serving.replay import Replayer

    dist_ctx, device = init_from_env(args.device)
    # A chain reads the evaluator's TTT predictions; a tree runs its own forwards.
    inputs, ev = open_evaluator(args, err, device, spec.steps if spec.is_chain else 1)
    quiet = Console(stderr=True, quiet=True)
    main = dist_ctx is None or dist_ctx.is_main
    layers, target = target_facts(inputs, ev)
    run = as_engine_runs_it(
        err if main else quiet, ev.draft, engine, num_layers=layers, target=target
    )
    ev = ev.with_draft(run.draft)
    if main:
        warn_config_wiring(err, ev)
        warn_slot_faults(err, ev)
    wirings, names = wirings_and_names(ev, args.wiring)
    # what the engine feeds this draft, read from its config as that engine reads it: a row of
    # its own where no preset is that wiring; a feed that leaves a block at zeros runs its own
    # draft (those fc columns zeroed), replayed beside the others
    feed = None if args.wiring else run.feed(ev.slot_info)
    fed_label = None
    if (
        feed is not None
        and feed[1] is run.draft
        and feed[0].slots not in {w.slots for w in wirings}
    ):
        wirings.append(feed[0])
        names.append(feed[2])
        fed_label = feed[2]
        feed = None
    n = len(ev.samples) if args.limit is None else min(args.limit, len(ev.samples))
    indices = dist_ctx.shard(n) if dist_ctx else None
    hidden = dist_ctx is not None and not dist_ctx.is_main
    with progress_bar("replaying", err, hidden=hidden) as advance:
        report = Replayer(ev, spec, engine).run(
            wirings, limit=args.limit, names=names, indices=indices, progress=advance
        )
    if feed is not None and feed[1] is not run.draft:
        wiring, silent, label = feed
        with progress_bar("replaying", err, hidden=hidden) as advance:
            more = Replayer(ev.with_draft(silent), spec, engine).run(
                [wiring], limit=args.limit, names=[label], indices=indices, progress=advance
            )
        report.wirings.extend(more.wirings)
        fed_label = label
    # the feed's row is labelled as reconcile labels it ("... feeds [L2, L4, nothing]")
    report.wirings = [
        replace(w, label=w.name) if fed_label is not None and w.name == fed_label else w
        for w in report.wirings
    ]
    if dist_ctx is not None:
        return gather_accept(dist_ctx, report), ev
    return report, ev


def _expect_at_temperature(args, report, ev, err) -> None:
    """Each replayed round's odds under the engine's rule at --temperature, from the target's
    verification of the draft's trees (`serving.expected_replay`)."""
    from inspector.commands.arguments import expectation_settings
    from inspector.serving.expected_replay import sample_odds

    if not args.target:
        raise InputError(
            None,
            "--temperature",
            "on samples the expectation needs the target's distributions: pass --target DIR "
            "(or run the engine's rounds with --live)",
        )
    settings = expectation_settings(args, report.engine, report.spec.is_chain)
    from inspector.capture.transformers_target import TargetModel

    target = TargetModel(args.target, dtype=args.dtype, device=str(ev.device))
    n = sum(len(w.per_sample) for w in report.wirings)
    with progress_bar("verifying at the temperature", err) as advance:
        done = 0
        for w in report.wirings:
            for s in w.per_sample:
                s.odds = sample_odds(
                    ev,
                    target,
                    s,
                    w.wiring,
                    report.spec,
                    settings.sampling,
                    settings.verification,
                )
                done += 1
                advance(done, n)
    report.sampling = settings


def honesty_notes(report) -> list[str]:
    """What the replay's number means for this data (the realised output is the samples' tokens)."""
    out = bound_notes(report.wirings)
    if report.mode == "live":
        return out
    return out + _off_target_notes(report)


def bound_notes(wirings) -> list[str]:
    """Where a request's last round ran past what its sample knows of the target's
    continuation: the counts there, and the accept length, are lower bounds."""
    worst = max(wirings, key=lambda w: w.lower_bound_requests, default=None)
    if worst is None or worst.lower_bound_requests == 0:
        return []
    n = worst.lower_bound_requests
    return [
        f"accept len is a lower bound: in {n} of {len(worst.per_sample)} requests the last round "
        "drafted past the sample's end, where the engine counts matches against the target's "
        "continuation, which these samples do not hold. `eagle-inspect capture TARGET INPUT "
        "--generate N` writes it (--past-stop)"
    ]


def _off_target_notes(report) -> list[str]:
    offs = [w.off_target for w in report.wirings if w.off_target is not None]
    if not offs:
        return [
            "the replay takes the samples' tokens as what the target emits; pass --target to check "
            "that they are its greedy output"
        ]
    off = offs[0]  # the same tokens under every wiring
    if off.acc is not None and off.acc > OFF_TARGET_NOTE:
        return [
            f"{pct(off.acc)} of the generated positions ({off.hits}/{off.total}) hold a token that "
            "is not the target's argmax: there the replay measures this data, not what the target "
            "would emit at temperature 0. `eagle-inspect capture TARGET INPUT --generate N` writes "
            "serving-exact samples"
        ]
    return []


def _drafting(report) -> str:
    """How the rounds draft: the spec's mode and engine flags, or a block draft's block."""
    spec = report.spec
    if report.family is not None:
        return f"{report.family}: {spec.steps} drafts a round, a block of {spec.steps + 1} rows"
    return f"{spec.mode}: {spec.flags()}"


def render_accept(report) -> Table:
    from inspector.serving.spec import EXACT_KV

    spec = report.spec
    title = safe(
        f"{report.checkpoint}: accept length per round as {report.engine.display} counts it "
        f"({report.mode}, {_drafting(report)}"
        + (
            f"; {Engine.SGLANG.display}'s topk > 1 draft KV approximation"
            if spec.kv != EXACT_KV
            else ""
        )
        + f") on {report.samples} samples, {report.device} {report.dtype_label}"
    )
    table = report_table(title)
    table.add_column("wiring", no_wrap=True)
    table.add_column("fc <- slots", no_wrap=True)
    table.add_column("accept len", justify="right")
    for k in range(spec.steps):
        table.add_column(f">={k + 1}", justify="right")
    table.add_column("rounds", justify="right")
    table.add_column("accepted", justify="right")
    table.add_column("emitted/round", justify="right")
    sampled = report.sampling is not None
    if sampled:
        table.add_column("expected (95% CI)", justify="right")
        table.add_column("z", justify="right")
    for w in report.wirings:
        st = w.stats
        name = w.name or "custom"
        al = st.accept_length
        shown = "-" if al is None else (">=" if st.is_bound else "") + fmt_float(al)
        row = [safe(name), safe(w.wiring.label(report.slots)), shown]
        row += [pct(x) for x in st.per_depth]
        epr = st.emitted_per_round
        row += [f"{st.rounds:,}", f"{st.accepted:,}", "-" if epr is None else fmt_float(epr)]
        if sampled:
            row += _expected_cells(w.expectation)
        table.add_row(*row)
    after = (
        f"; rounds include {report.engine.display}'s one round after each request's stop "
        "(overlap scheduler)"
        if report.engine.overlap_round and report.overlap
        else ""
    )
    sampling = ""
    if sampled:
        sampling = (
            f"; sampled at {report.sampling.label()}. expected: 1 + the sum of each round's "
            "expected accepted count under the rule, given its start, / rounds (the interval: "
            "bootstrap over requests); z: (accepted - expected) / its standard deviation, about "
            "N(0, 1) when verification follows the rule"
        )
    table.caption = (
        "accept len: 1 + accepted / rounds, pooled over rounds, as the engines log it "
        f"({_VLLM}'s mean acceptance length, {_SGLANG}'s avg_spec_accept_length); a last round "
        "counts every drafted token that matched the target, also past the stop. >=k: the share "
        f"of rounds accepting at least k drafted tokens ({_VLLM}'s per-position acceptance rate); "
        "emitted/round: tokens the requests received per round" + after + sampling
    )
    table.caption_justify = "left"
    return table


def _expected_cells(e) -> list[str]:
    if e is None or e.accept_length is None:
        return ["-", "-"]
    ci = "" if e.low is None else f" [{fmt_float(e.low)}, {fmt_float(e.high)}]"
    return [fmt_float(e.accept_length) + ci, "-" if e.z is None else f"{e.z:+.2f}"]


def render_by_position(report) -> Group:
    table = report_table("accept length by context position (round start)")
    table.add_column("tokens", no_wrap=True)
    buckets = sorted({b["start"] for w in report.wirings for b in w.stats.by_position()})
    per = [{b["start"]: b for b in w.stats.by_position()} for w in report.wirings]
    for w in report.wirings:
        name = w.name or w.wiring.label(report.slots)
        table.add_column(safe(name), justify="right")
    for s in buckets:
        cells = []
        for p in per:
            b = p.get(s)
            cells.append("-" if b is None else f"{b['accept_length']:.2f} ({b['rounds']})")
        end = next(b["end"] for p in per for b in p.values() if b["start"] == s)
        table.add_row(f"{s:,}-{end:,}", *cells)
    return Group(Text(""), table)
