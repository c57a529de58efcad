"""`eagle-inspect reconcile CKPT --engine-log FILE [SAMPLES | --prompts INPUT --target T]`: what a
serving engine logged, held against the replay of the same requests under the draft's configured
wiring and the alternatives, and what the difference means."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console, Group
from rich.panel import Panel
from rich.text import Text

from inspector.commands.common import open_evaluator
from inspector.commands.output import report_table, safe, stdout_console, write_json
from inspector.errors import InputError
from inspector.formatting import fmt_float, pct
from inspector.progress import progress_bar

DEFAULT_MAX_NEW = 128

COLOURS = {"as_is": "green", "wrong_wiring": "red", "engine_fault": "red", "other_data": "yellow"}


def configured_wiring(draft, infos, n_blocks: int):
    """The wiring the draft's config names (its aux ids as HF indices, fed in ascending order as
    engines feed them), or None when the ids are absent, ambiguous or not among the slots."""
    from inspector.doctor.layer_ids import configured_hf_ids
    from inspector.doctor.serving import slots_for_hf
    from inspector.wiring import Wiring

    readings = configured_hf_ids(draft.config.aux_layer_ids, draft.config.aux_layer_convention)
    if len(readings) != 1 or len(readings[0]) != n_blocks:
        return None
    slots = slots_for_hf(readings[0], infos)
    return Wiring(slots) if slots is not None else None


def _wirings(args, infos, n_blocks: int, draft) -> tuple[list, list[str], int | None]:
    """(wirings, names, index of the configured one or None): the configured wiring first, then
    the presets and every --wiring, without repeats."""
    from inspector.wiring import PRESETS, parse_wiring, preset_name

    out: list = []
    names: list[str | None] = []

    def add(w, name: str | None) -> None:
        if w.slots in [x.slots for x in out]:
            return
        out.append(w)
        names.append(name)

    conf = configured_wiring(draft, infos, n_blocks)
    if conf is not None:
        add(conf, "configured")
    for text in args.wiring or list(PRESETS):
        add(parse_wiring(text, infos, n_blocks), preset_name(text))
    return out, names, 0 if conf is not None else None


def run_reconcile(args: argparse.Namespace) -> int:
    from inspector.doctor.reconcile import pair_requests, reconcile
    from inspector.formats.engine_log import read_engine_log
    from inspector.serving.engines import Engine
    from inspector.serving.spec import DEFAULT_STEPS, DraftSpec

    err = Console(stderr=True)
    log = read_engine_log(args.engine_log)
    if log.accept_length is None:
        raise InputError(log.path, None, "holds no accept length (no rounds counted)")
    steps = args.steps or log.steps or DEFAULT_STEPS
    if log.steps is not None and args.steps and args.steps != log.steps:
        raise InputError(
            log.path,
            "Per-position acceptance rate",
            f"the engine drafted {log.steps} tokens a round, --steps says {args.steps}",
        )
    spec = DraftSpec(steps, args.topk, args.draft_tokens)
    engine = Engine(log.engine)
    if engine is Engine.VLLM and not spec.is_chain:
        raise InputError(None, "--topk", "vLLM drafts chains: --topk 1 for a vLLM log")
    err.print(
        f"note: {safe(log.description)} from {safe(str(log.path))}: accept length "
        f"{fmt_float(log.accept_length)}; replaying "
        + (f"vLLM num_speculative_tokens {spec.steps}" if engine is Engine.VLLM else spec.flags()),
        highlight=False,
        soft_wrap=True,
    )
    if args.prompts:
        report, samples, configured = _live(args, spec, engine, err, log)
    elif args.temperature > 0:
        raise InputError(
            None,
            "--temperature",
            "at a temperature the rounds are random: reconcile runs the live loop for each "
            "round's odds (--prompts INPUT --target T, the engine's requests)",
        )
    else:
        report, samples, configured = _replay(args, spec, engine, err)
    pairs, notes = pair_requests(log, samples)
    if configured is None:
        notes.append(
            "the draft's config names no wiring of these slots (no aux ids, or ids the samples "
            "do not hold): the wirings tried are the presets and --wiring"
        )
    if not any(w.stats.rounds for w in report.wirings):
        raise InputError(
            None, "SAMPLES", "no round to replay: no sample holds a generated (loss-masked) run"
        )
    result = reconcile(log, report, configured=configured, pairs=pairs, notes=notes)
    for line in result.notes:
        err.print(f"note: {safe(line)}", highlight=False, soft_wrap=True)
    if args.json:
        write_json({"config": {**spec.to_dict(), "engine": engine.value}, **result.to_dict()})
        return 0
    out = stdout_console(None if sys.stdout.isatty() else 200)
    out.print(render(result, report))
    return 0


def _replay(args, spec, engine, err):
    from inspector.serving.replay import Replayer

    _, ev = open_evaluator(args, err, args.device, spec.steps if spec.is_chain else 1)
    wirings, names, configured = _wirings(args, ev.slot_info, ev.n_blocks, ev.draft)
    n = len(ev.samples) if args.limit is None else min(args.limit, len(ev.samples))
    with progress_bar("replaying", err) as advance:
        report = Replayer(ev, spec, engine).run(
            wirings,
            limit=args.limit,
            names=names,
            progress=advance,
        )
    samples = []
    for i in range(n):
        try:
            s = ev.samples[i]
        except InputError:
            continue
        samples.append((i, s.input_ids.tolist(), s.loss_mask.tolist()))
    return report, samples, configured


def _live(args, spec, engine, err, log):
    """The live loop over the prompts (the engine's requests): real speculative decoding against
    --target, the same rounds the engine runs at temperature 0, and at a temperature each
    round's odds under the engine's rule."""
    from inspector.commands.accept_live import load_live_draft, run_loop, sampling_options
    from inspector.formats.samples import v1_slot_info
    from inspector.serving.live import draft_ids

    if args.samples:
        raise InputError(None, "--prompts", "replaces SAMPLES: pass one or the other")
    ns = argparse.Namespace(**{**vars(args), "samples": []})
    _, target, prompts, draft = load_live_draft(ns)
    max_new = args.max_new
    if max_new is None:
        lengths = [len(r.output_ids) for r in log.requests if r.output_ids is not None]
        max_new = max(lengths) if lengths else DEFAULT_MAX_NEW
    # the slots the live loop's capture plan gives this draft, to name the wirings
    from inspector.capture.plan import plan_slots
    from inspector.capture.target import read_target_info

    info = read_target_info(target)
    plan = plan_slots(info.num_layers, layers=None, draft=draft_ids(draft), engine=None)
    infos = v1_slot_info([None if s == "post-norm" else s for s in plan.slots])
    wirings, names, configured = _wirings(args, infos, draft.config.num_fc_blocks, draft)
    report = run_loop(
        err,
        draft,
        target,
        prompts,
        spec,
        [list(w.slots) for w in wirings],
        max_new=max_new,
        target_dtype=args.dtype,
        names=names,
        limit=args.limit,
        engine=engine,
        **sampling_options(args, engine),
    )
    from inspector.capture.inputs import read_input

    records, _ = read_input(prompts, target, vocab_size=info.vocab_size, max_length=10**9)
    samples = []
    by_index = {s.index: s for s in report.wirings[0].per_sample}
    for i, r in enumerate(records):
        if i in by_index:
            samples.append((i, list(r.prompt), []))
    # a live request's tokens are its prompt + what the engine emitted: pair by prompt
    return report, _prompt_pairs(samples, log), configured


def _prompt_pairs(samples, log):
    """Pair engine requests by their prompt ids (the output is what both decoded greedily)."""
    by_prompt = {}
    for r in log.requests:
        if r.prompt_ids is not None and r.output_ids is not None:
            by_prompt.setdefault(tuple(r.prompt_ids), r)
    out = []
    for i, prompt, mask in samples:
        r = by_prompt.get(tuple(prompt))
        out.append((i, prompt + (r.output_ids if r is not None else []), mask))
    return out


def render(result, report) -> Group:
    from inspector.doctor.reconcile_sampled import expected_text

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
        title=f"[{COLOURS[verdict]}]{verdict.replace('_', ' ')}[/]",
        title_align="left",
        border_style=COLOURS[verdict],
    )
    log = result.log
    table = report_table(
        safe(
            f"the engine's figure against each wiring's {report.mode} of the same requests "
            f"({report.spec.flags()})"
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
        # at a temperature the engine's figure is within the noise of a wiring's, never equal
        fits = "consistent" if sampled else "equal"
        marks = [m for m, on in ((fits, c.equal), ("best", c.label == result.best)) if on]
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
