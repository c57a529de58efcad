"""`eagle-inspect reconcile CKPT --engine-log FILE [SAMPLES | --prompts INPUT --target T]`: what a
serving engine logged, held against the replay of the same requests under the draft's configured
wiring and the alternatives, and what the difference means."""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import replace

from rich.console import Console, Group
from rich.panel import Panel
from rich.text import Text

from inspector.commands.common import as_engine_runs_it, open_evaluator
from inspector.commands.exit_codes import for_verdict
from inspector.commands.output import (
    VERDICT_COLOURS,
    report_table,
    safe,
    stdout_console,
    write_json,
)
from inspector.commands.reconcile_runs import check_steps, render_runs, same_engine
from inspector.doctor.reconcile.candidates import (
    candidate_wirings,
    engine_fed,
    silent_feeds,
)
from inspector.errors import InputError
from inspector.formatting import fmt_float, pct
from inspector.progress import progress_bar, stage_progress_bar

DEFAULT_MAX_NEW = 128


def engine_flags(spec, engine) -> str:
    """The engine's own flags for these draft settings."""
    flag = engine.spec.steps_flag
    return f"{engine.display} {flag} {spec.steps}" if flag else spec.flags()


def run_reconcile(args: argparse.Namespace) -> int:
    from inspector.doctor.reconcile.hidden_state import hidden_state_blame
    from inspector.doctor.reconcile.pipeline import pair_requests, reconcile
    from inspector.doctor.reconcile.runs import across_runs, run_labels
    from inspector.engines import Engine
    from inspector.formats.block_config import block_draft_family
    from inspector.formats.engine_log import read_engine_log
    from inspector.serving.spec import DEFAULT_STEPS, DraftSpec

    family = block_draft_family(args.checkpoint)
    if family is not None:
        from inspector.commands.reconcile_block import run_block_reconcile

        return run_block_reconcile(args, family)
    err = Console(stderr=True)
    paths = args.engine_log if isinstance(args.engine_log, list) else [args.engine_log]
    logs = [read_engine_log(p, decode_log_interval=args.decode_log_interval) for p in paths]
    for log in logs:
        if log.accept_length is None:
            raise InputError(log.path, None, "holds no accept length (no rounds counted)")
    same_engine(logs, args)
    log = logs[0]
    steps = args.steps or next(
        (x for lg in logs for x in (lg.steps, lg.most_drafted) if x is not None), DEFAULT_STEPS
    )
    for lg in logs:
        check_steps(lg, args.steps, steps)
    synthetic = _synthetic_setting(args)
    spec = DraftSpec(steps, args.topk, args.draft_tokens)
    engine = Engine(log.engine)
    if not engine.spec.trees and not spec.is_chain:
        raise InputError(
            None, "--topk", f"{engine.display} drafts chains: --topk 1 for a {engine.display} log"
        )
    for lg in logs:
        err.print(
            f"note: {safe(lg.description)} from {safe(str(lg.path))}: accept length "
            f"{fmt_float(lg.accept_length)}; replaying " + engine_flags(spec, engine),
            highlight=False,
            soft_wrap=True,
        )
    if args.prompts:
        report, samples, configured, trained, hc = _live(args, spec, engine, err, log)
    elif args.temperature > 0:
        raise InputError(
            None,
            "--temperature",
            "at a temperature the rounds are random: reconcile runs the live loop for each "
            "round's odds (--prompts INPUT --target T, the engine's requests)",
        )
    else:
        report, samples, configured, trained, hc = _replay(args, spec, engine, err)
    if not any(w.stats.rounds for w in report.wirings):
        raise InputError(
            None, "SAMPLES", "no round to replay: no sample holds a generated (loss-masked) run"
        )
    results, reports = [], []
    for lg in logs:
        pairs, notes = pair_requests(lg, samples)
        run_report = report
        if engine.overlap_round and not _overlap(args, lg):
            run_report = report.without_overlap_rounds()
            notes.append(
                f"{engine.display} without its overlap scheduler"
                + (
                    f" (its decode lines show a CPU, where {engine.display} forces it off)"
                    if lg.device
                    else ""
                )
                + ": the round it would run after each request's stop is not counted"
            )
        if configured is None:
            notes.append(
                "the draft's config names no wiring of these slots (no aux ids, or ids the "
                "samples do not hold): the wirings tried are the presets and --wiring"
            )
        result = reconcile(
            lg,
            run_report,
            configured=configured,
            pairs=pairs,
            notes=notes,
            trained=trained,
            engine_dtype=args.engine_dtype,
            adaptive="--adaptive" if args.adaptive else None,
            synthetic=synthetic,
        )
        results.append(hidden_state_blame(result, hc))  # a hyper-connection target's state
        reports.append(run_report)
    labels = run_labels(logs)
    results, comparison = across_runs(results, labels)
    many = len(results) > 1
    for label, result in zip(labels, results, strict=True):
        for line in result.notes:
            head = f"{label}: " if many else ""
            err.print(f"note: {safe(head + line)}", highlight=False, soft_wrap=True)
    status = max(for_verdict(r.verdict) for r in results)
    config = {**spec.to_dict(), "engine": engine.value}
    if args.json:
        if not many:
            if engine.overlap_round:
                config["overlap_scheduler"] = reports[0].overlap
            write_json({"config": config, **results[0].to_dict()})
            return status
        runs = []
        for label, result, rep in zip(labels, results, reports, strict=True):
            extra = {"overlap_scheduler": rep.overlap} if engine.overlap_round else {}
            runs.append({"run": label, **extra, **result.to_dict()})
        doc = {
            "config": config,
            "runs": runs,
            "across_runs": comparison.to_dict() if comparison is not None else None,
        }
        write_json(doc)
        return status
    out = stdout_console(None if sys.stdout.isatty() else 200)
    if not many:
        out.print(render(results[0], reports[0]))
        return status
    for i, (label, result, rep) in enumerate(zip(labels, results, reports, strict=True)):
        out.print(Text(f"run {i + 1} of {len(results)}: {label} ({result.log.path})", style="bold"))
        out.print(render(result, rep))
    out.print(render_runs(comparison, results))
    return status


def _synthetic_setting(args):
    """The synthetic-acceptance setting the flags name (None: none)."""
    from inspector.doctor.reconcile.synthetic import SyntheticSetting
    from inspector.engines import Engine

    if args.synthetic_rates is not None and args.simulated_accept_len is not None:
        raise InputError(
            None,
            "--synthetic-rates",
            f"{Engine.VLLM.display}'s; --simulated-accept-len is {Engine.SGLANG.display}'s: one "
            "of them",
        )
    if args.synthetic_rates is not None:
        return SyntheticSetting.vllm(args.synthetic_rates)
    if args.simulated_accept_len is not None:
        return SyntheticSetting.sglang(args.simulated_accept_len)
    return None


def _overlap(args, log) -> bool:
    """Whether SGLang's overlap scheduler ran: --sglang-overlap, or (auto) off where the log
    shows SGLang on a CPU (SGLang 0.5.23 srt/arg_groups/speculative_hook.py forces it off
    for speculative decoding there) and on elsewhere."""
    if args.sglang_overlap != "auto":
        return args.sglang_overlap == "on"
    return log.device != "cpu"


def _replay(args, spec, engine, err):
    from inspector.doctor.reconcile.pipeline import token_key
    from inspector.formats.target_config import (
        data_config_hyper_connections,
        data_config_target,
        read_hyper_connections,
        read_target_class,
    )
    from inspector.serving.replay import Replayer

    inputs, ev = open_evaluator(args, err, args.device, spec.steps if spec.is_chain else 1)
    trained = _search(ev, err)
    infos = ev.slot_info
    layers = next((s.hf_index for s in infos if s.verifier and not s.post_norm), None)
    target = read_target_class(inputs.target) or data_config_target(ev.samples.data_config)
    fed = engine_fed(ev.draft, layers, target)
    wirings, names, configured, ti = candidate_wirings(
        args.wiring, infos, ev.n_blocks, ev.draft, trained.contenders, engine_fed=fed
    )
    n = len(ev.samples) if args.limit is None else min(args.limit, len(ev.samples))
    served = ev.with_draft(as_engine_runs_it(err, ev.draft, engine).draft)  # the search keeps ev
    with progress_bar("replaying", err) as advance:
        report = Replayer(served, spec, engine).run(
            wirings,
            limit=args.limit,
            names=names,
            progress=advance,
        )
    nothing = engine.spec.feeds_nothing_for_last
    silent, notes = silent_feeds(fed, infos, served.draft, layers) if nothing else ([], [])
    for line in notes:
        err.print(f"note: {safe(line)}", highlight=False, soft_wrap=True)
    for name, label, w, silent_draft in silent:
        with progress_bar("replaying", err) as advance:
            more = Replayer(served.with_draft(silent_draft), spec, engine).run(
                [w], limit=args.limit, names=[name], progress=advance
            )
        report.wirings.append(replace(more.wirings[0], label=label))
    samples = []
    for i in range(n):
        try:
            s = ev.samples[i]
        except InputError:
            continue
        samples.append((i, token_key(s.input_ids.tolist())))
    hc = read_hyper_connections(inputs.target) or data_config_hyper_connections(
        ev.samples.data_config
    )
    return report, samples, configured, (ti, trained), hc


def _search(ev, err):
    """The wiring the weights were trained on (`doctor.wiring.trained`), never the config's."""
    from inspector.doctor.wiring.trained import find_trained_wiring

    with stage_progress_bar(err) as advance:
        return find_trained_wiring(ev, progress=advance, fingerprint=True)


def _live(args, spec, engine, err, log):
    """The live loop over the prompts (the engine's requests): real speculative decoding against
    --target, the same rounds the engine runs at temperature 0, and at a temperature each
    round's odds under the engine's rule."""
    from inspector.commands.accept_live import (
        load_live_draft,
        plan_infos,
        run_loop,
        sampling_options,
    )
    from inspector.serving.live import LiveSettings, draft_ids

    if args.samples:
        raise InputError(None, "--prompts", "replaces SAMPLES: pass one or the other")
    ns = argparse.Namespace(**{**vars(args), "samples": []})
    _, target, prompts, draft = load_live_draft(ns)
    served = as_engine_runs_it(err, draft, engine).draft  # the wiring search keeps the weights
    max_new = args.max_new
    if max_new is None:
        lengths = [len(r.output_ids) for r in log.requests if r.output_ids is not None]
        max_new = max(lengths) if lengths else DEFAULT_MAX_NEW
    # every layer the wiring search needs, whatever the config names: the config is where the
    # wiring bug lives, so the slots it names cannot be the only ones captured
    from inspector.capture.plan import plan_slots
    from inspector.capture.transformers_target import TargetModel, read_target_info
    from inspector.doctor.wiring.trained import search_layers
    from inspector.evaluate import Evaluator
    from inspector.formats import SampleSet
    from inspector.serving.live import live_folder

    info = read_target_info(target)
    n_blocks = draft.config.num_fc_blocks
    layers = ",".join(map(str, search_layers(info.num_layers, draft.config.aux_layer_ids)))
    infos = plan_infos(plan_slots(info.num_layers, layers=layers))
    # the presets: over the slots capture's plan gives this draft (its configured layers and
    # the target's last one), as `accept --live` makes them
    narrow = plan_infos(plan_slots(info.num_layers, draft=draft_ids(draft)))
    wirings, names, _, _ = candidate_wirings(
        args.wiring, infos, n_blocks, draft, preset_infos=narrow
    )
    if not wirings:  # no configured ids and no preset: any wiring captures every searched layer
        from inspector.wiring import Wiring

        wirings, names = [Wiring(tuple(range(n_blocks)))], [None]
    model = TargetModel(target, dtype=args.dtype, device=str(draft.device))
    live = LiveSettings(
        spec=spec,
        max_new=max_new,
        target_dtype=args.dtype,
        limit=args.limit,
        engine=engine,
        layers=layers,
        **sampling_options(args, engine),
    )
    first = [list(wirings[0].slots)]
    with tempfile.TemporaryDirectory(prefix="eagle-reconcile-") as tmp:
        # the first wiring's realised sequences, every searched layer kept: the search's samples
        kept = replace(live, wirings=first, names=names[:1], out=tmp)
        report = run_loop(err, served, target, prompts, kept, model=model)
        folder = live_folder(tmp, first[0], wirings[0])
        cfg = draft.config
        samples_set = SampleSet(
            [str(folder)],
            vocab_size=cfg.vocab_size,
            hidden_size=cfg.target_hidden_size,
            num_layers=info.num_layers,
        )
        trained = _search(Evaluator(draft, samples_set), err)
    from inspector.formats.target_config import read_target_class

    fed = engine_fed(draft, info.num_layers, read_target_class(target))
    wirings, names, configured, ti = candidate_wirings(
        args.wiring, infos, n_blocks, draft, trained.contenders, preset_infos=narrow, engine_fed=fed
    )
    done = {report.wirings[0].wiring.slots: report.wirings[0]}
    rest = [(w, n) for w, n in zip(wirings, names, strict=True) if w.slots not in done]
    if rest:
        others = replace(live, wirings=[list(w.slots) for w, _ in rest], names=[n for _, n in rest])
        more = run_loop(err, served, target, prompts, others, model=model)
        done.update({wa.wiring.slots: wa for wa in more.wirings})
    report.wirings = [done[w.slots] for w in wirings]
    nothing = engine.spec.feeds_nothing_for_last
    silent, notes = silent_feeds(fed, infos, served, info.num_layers) if nothing else ([], [])
    for line in notes:
        err.print(f"note: {safe(line)}", highlight=False, soft_wrap=True)
    for name, label, w, silent_draft in silent:
        alone = replace(live, wirings=[list(w.slots)], names=[name])
        more = run_loop(err, silent_draft, target, prompts, alone, model=model)
        report.wirings.append(replace(more.wirings[0], label=label))
    from inspector.capture.inputs import read_input

    records, _ = read_input(prompts, target, vocab_size=info.vocab_size, max_length=10**9)
    samples = []
    by_index = {s.index: s for s in report.wirings[0].per_sample}
    for i, r in enumerate(records):
        if i in by_index:
            samples.append((i, list(r.prompt), []))
    from inspector.formats.target_config import read_hyper_connections

    # a live request's tokens are its prompt + what the engine emitted: pair by prompt
    hc = read_hyper_connections(target)
    return report, _prompt_pairs(samples, log), configured, (ti, trained), hc


def _prompt_pairs(samples, log):
    """Pair engine requests by their prompt ids (the output is what both decoded greedily)."""
    by_prompt = {}
    for r in log.requests:
        if r.prompt_ids is not None and r.output_ids is not None:
            by_prompt.setdefault(tuple(r.prompt_ids), r)
    from inspector.doctor.reconcile.pipeline import token_key

    out = []
    for i, prompt, _ in samples:
        r = by_prompt.get(tuple(prompt))
        out.append((i, token_key(prompt + (r.output_ids if r is not None else []))))
    return out


def render(result, report) -> Group:
    from inspector.doctor.reconcile.words import expected_text

    verdict = result.verdict.value
    body = Text(result.summary)
    if result.fix:
        body.append("\nfix: ", style="bold")
        body.append(result.fix)
    for f in result.faults:
        body.append("\n- ", style="dim")
        body.append(f)
    panel = Panel(
        body,
        title=f"[{VERDICT_COLOURS[verdict]}]{verdict.replace('_', ' ')}[/]",
        title_align="left",
        border_style=VERDICT_COLOURS[verdict],
    )
    log = result.log
    table = report_table(
        safe(
            f"the engine's figure against each wiring's {report.mode} of the same requests "
            f"({engine_flags(report.spec, report.engine)})"
        )
    )
    table.add_column("", no_wrap=True)
    table.add_column("accept len", justify="right")
    table.add_column("rounds", justify="right")
    table.add_column("accepted", justify="right")
    table.add_column("requests equal", justify="right")
    sampled = any(c.expected is not None for c in result.checks)
    if sampled:
        table.add_column("expected (95% CI)", justify="right")
        table.add_column("z by depth", justify="right")
    table.add_column("", no_wrap=True)
    table.add_row(
        safe(log.description),
        fmt_float(log.accept_length) if log.accept_length is not None else "-",
        "-" if log.rounds is None else f"{log.rounds:,}",
        "-" if log.accepted is None else f"{log.accepted:,}",
        "",
        *([_logged_shares(log), ""] if sampled else []),
        "logged",
    )
    for c in result.checks:
        st = c.stats
        al = (
            "-"
            if st.accept_length is None
            else (">=" if st.is_bound else "") + fmt_float(st.accept_length)
        )
        eq = "" if c.requests_equal is None else f"{c.requests_equal}/{result.requests_matched}"
        # at a temperature the engine's figure is within the noise of a wiring's, never equal;
        # under an adaptive draft length it is at most a wiring's fixed-K replay
        fits = "consistent" if sampled else ("within bound" if result.bound else "equal")
        best = "trained" if result.trained is not None else "best"
        marks = [m for m, on in ((fits, c.equal), (best, c.label == result.best)) if on]
        extra = []
        if sampled:
            e = c.expected
            extra = [
                "-" if e is None else expected_text(e).removeprefix("expected "),
                " ".join(f"{p.z:+.1f}" for p in c.positions or []) or "-",
            ]
        row = [safe(c.label), al, f"{st.rounds:,}", f"{st.accepted:,}", eq, *extra]
        table.add_row(*row, ", ".join(marks))
    if sampled:
        table.caption = (
            "at a temperature: accept len, rounds and accepted are the live loop's own random "
            "run; expected: the rule's expectation on its rounds; z by depth: the engine's "
            "logged share of rounds accepting >= k against the expected share (|z| <= 4: "
            "consistent); the logged row's last column: its shares by depth"
        )
        table.caption_justify = "left"
    return Group(panel, table)


def _logged_shares(log) -> str:
    if log.accepted_per_pos is None or not log.rounds:
        return "-"
    return " ".join(pct(c / log.rounds) for c in log.accepted_per_pos)
