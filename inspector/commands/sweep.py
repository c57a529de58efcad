"""`eagle-inspect sweep RUN_DIR SAMPLES`: every checkpoint of a training run replayed over the same
samples (`serving.checkpoint_sweep`): the accept length against the training step, the best, how
far the last is from it; a table, a text chart, an SVG, or one JSON document."""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from pathlib import Path

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from inspector.commands.arguments import add_engine_args, positive
from inspector.commands.gates import EXIT_GATE, gate_exit
from inspector.commands.output import report_table, safe, stdout_console, write_json
from inspector.errors import InputError
from inspector.formatting import fmt_float, pct
from inspector.progress import progress_bar


def add_sweep_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sweep",
        help="every checkpoint of a training run: accept length against the step, the best",
        description="Find the checkpoints of a training run (SpecForge's epoch_*_step_* folders, "
        "speculators' and the HF Trainer's numbered ones, any folder with a config.json and "
        "*.safetensors), replay each over the same SAMPLES under the same engine settings (as "
        "`accept`), and report the accept length, step accuracies and the trainers' metrics per "
        "checkpoint in training order, the best by accept length and how far the last one is "
        "from it. Finished checkpoints are kept in a state file and not re-run.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="the training run's output folder")
    p.add_argument("samples", nargs="+", metavar="SAMPLES", help="sample folders or files")
    p.add_argument("--target", metavar="DIR", help="target model folder (the trainers' metrics)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N (default auto)")
    p.add_argument(
        "--dtype", default="auto", help="auto | float32 | bfloat16 | float16 (as accept's)"
    )
    add_engine_args(p)
    p.add_argument("--wiring", default="train", metavar="W", help="the wiring (default train)")
    p.add_argument("--limit", type=positive, metavar="N", help="only the first N samples")
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    p.add_argument("--svg", metavar="FILE", help="also draw accept length against step to FILE")
    p.add_argument(
        "--profile",
        metavar="DIR",
        help="also write each checkpoint's acceptance profile to "
        "DIR/<checkpoint>.speculation_profile.json (outside the run)",
    )
    p.add_argument("--png", metavar="FILE", help="the same chart as a PNG image")
    p.add_argument(
        "--report",
        metavar="FILE",
        help="also write a self-contained report (FILE.md or FILE.html): the table, the chart, "
        "the settings, the inputs' fingerprints",
    )
    p.add_argument(
        "--tensorboard",
        metavar="DIR",
        help="also write the figures as TensorBoard scalars against the training step to an "
        "event file in DIR (not inside the run: beside it, `tensorboard --logdir` shows both)",
    )
    p.add_argument(
        "--state",
        metavar="FILE",
        help="the resume file (default: one per run and settings under the user's cache folder)",
    )
    p.add_argument(
        "--fresh", action="store_true", help="ignore the state file: evaluate every checkpoint"
    )
    p.add_argument(
        "--fail-under",
        type=float,
        metavar="X",
        help=f"exit {EXIT_GATE} (one line on stderr) when the best checkpoint's accept length is "
        "below X",
    )


def default_state(run_dir: Path, settings: str) -> Path:
    """Under XDG_CACHE_HOME (else ~/.cache)/eagle-inspect/sweeps: never inside the run."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    key = hashlib.sha256(f"{run_dir.resolve()}|{settings}".encode()).hexdigest()[:16]
    return base / "eagle-inspect" / "sweeps" / f"{key}.jsonl"


def sweep_gate(report, threshold: float) -> str | None:
    best = report.best
    if best is not None and best.accept_length is not None and best.accept_length >= threshold:
        return None
    shown = "none" if best is None else f"{best.name} at {fmt_float(best.accept_length, 4)}"
    return f"fail-under: the best checkpoint's accept length is {shown}, below {threshold:g}"


def _write_profiles(folder: Path, report, spec, engine, args) -> None:
    """DIR/<checkpoint>.speculation_profile.json for each evaluated checkpoint."""
    from inspector.serving.profile import profile_of_checkpoint, write_profile

    for r in report.results:
        profile = profile_of_checkpoint(
            r,
            spec=spec.to_dict(),
            engine=engine.value,
            wiring=args.wiring,
            dataset=" ".join(map(str, args.samples)),
        )
        write_profile(folder / f"{r.name}.speculation_profile.json", profile)


def run_sweep_run(args: argparse.Namespace) -> int:
    from inspector.commands.accept import spec_from_args
    from inspector.commands.common import config_wiring_note
    from inspector.distributed import gather_sweep, init_from_env
    from inspector.engines import parse_engine
    from inspector.formats.run_dir import find_checkpoints
    from inspector.serving.checkpoint_sweep import SweepSettings, sweep_run

    spec = spec_from_args(args)
    engine = parse_engine(args.engine, spec.is_chain)
    run = Path(args.run_dir)
    scan = find_checkpoints(run)
    # Under torchrun each rank takes whole checkpoints, round-robin (see `distributed`); rank 0
    # alone speaks.
    dist_ctx, device = init_from_env(args.device)
    main = dist_ctx is None or dist_ctx.is_main
    err = Console(stderr=True, quiet=not main)
    for path, why in scan.refused:
        err.print(
            f"[yellow]skipped[/] {safe(str(path))}: {safe(why)}", highlight=False, soft_wrap=True
        )
    if not scan.checkpoints:
        raise InputError(run, None, "no checkpoint with weights in it")
    for flag, out in (
        ("--tensorboard", args.tensorboard),
        ("--svg", args.svg),
        ("--png", args.png),
        ("--profile", args.profile),
    ):
        if out:
            _check_outside(Path(out), flag, [run, *args.samples])
    state = None
    if not args.fresh:
        settings = f"{spec.to_dict()}|{engine.value}|{args.wiring}|{args.samples}|{args.limit}"
        state = Path(args.state) if args.state else default_state(run, settings)
    err.print(
        f"note: {len(scan.checkpoints)} checkpoints in {safe(str(run))}"
        + (f"; finished ones kept in {safe(str(state))}" if state is not None else ""),
        highlight=False,
        soft_wrap=True,
    )
    mine = scan.checkpoints
    if dist_ctx is not None:
        mine = [scan.checkpoints[i] for i in dist_ctx.shard(len(scan.checkpoints))]
    with progress_bar("checkpoints", err, hidden=not main) as advance:
        settings = SweepSettings(
            spec,
            engine,
            wiring=args.wiring,
            target=args.target,
            device=device,
            dtype=args.dtype,
            limit=args.limit,
            state=state,
            overlap=args.sglang_overlap != "off",
        )
        report = sweep_run(
            mine,
            args.samples,
            settings,
            progress=advance,
            refused=scan.refused if main else (),
            check=config_wiring_note,
        )
    if dist_ctx is not None:
        report = gather_sweep(dist_ctx, report, [str(c.path) for c in scan.checkpoints])
        if report is None:
            return 0  # rank 0 prints and gates
    report.run_dir = str(run)
    for path, why in report.refused[len(scan.refused) :]:
        err.print(f"[yellow]skipped[/] {safe(path)}: {safe(why)}", highlight=False, soft_wrap=True)
    for r in report.results:
        if r.note:
            err.print(f"note: {safe(r.name)}: {safe(r.note)}", highlight=False, soft_wrap=True)
    if not report.results:
        raise InputError(run, None, "none of its checkpoints could be evaluated")
    resumed = sum(r.resumed for r in report.results)
    if resumed:
        err.print(f"note: {resumed} checkpoints read from the state file", highlight=False)
    if args.svg:
        _write_chart(Path(args.svg), "--svg", _svg(report).encode("utf-8"))
    if args.png:
        from inspector.commands.sweep_png import png_chart

        _write_chart(Path(args.png), "--png", png_chart(*_chart_args(report)))
    if args.report:
        _write_report(args, report)
    if args.profile:
        _write_profiles(Path(args.profile), report, spec, engine, args)
        err.print(
            f"note: an acceptance profile per checkpoint in {safe(args.profile)}",
            highlight=False,
            soft_wrap=True,
        )
    if args.tensorboard:
        written = _write_tensorboard(Path(args.tensorboard), report, [run, *args.samples])
        err.print(
            f"note: TensorBoard scalars in {safe(str(written))}", highlight=False, soft_wrap=True
        )
    if args.json:
        write_json(report.to_dict())
    else:
        out = stdout_console(None if sys.stdout.isatty() else 200)
        out.print(render_sweep(report))
    return gate_exit(err, sweep_gate, report, args.fail_under)


def _x(report) -> list[float]:
    """The x of each checkpoint: its step, else its place in the order."""
    steps = [r.step for r in report.results]
    if all(s is not None for s in steps):
        return [float(s) for s in steps]  # type: ignore[arg-type]
    return [float(i) for i in range(len(steps))]


def _chart_args(report) -> tuple[list[float], list, list[str], int | None, str]:
    """What both charts draw: x, accept length and name per checkpoint, the best's index, the
    title."""
    best = report.best
    return (
        _x(report),
        [r.accept_length for r in report.results],
        [r.name for r in report.results],
        None if best is None else report.results.index(best),
        f"{report.run_dir}: accept length per round ({report.spec.flags()})",
    )


def _svg(report) -> str:
    from inspector.commands.sweep_plot import svg_chart

    return svg_chart(*_chart_args(report))


def _write_report(args, report) -> None:
    from inspector.commands.report_file import Report, fingerprint, from_rich, write_report

    table, chart, line = sweep_parts(report)
    doc = report.to_dict()
    inputs = [("checkpoint", r.path, fingerprint(r.path)) for r in report.results]
    inputs += [("samples", str(s), fingerprint(s)) for s in args.samples]
    if args.target:
        inputs.append(("target", str(args.target), fingerprint(args.target)))
    write_report(
        args.report,
        Report(
            title=f"sweep: {report.run_dir}",
            settings={**doc["config"], "wiring": report.wiring, "samples": report.samples},
            inputs=inputs,
            tables=[("Checkpoints", from_rich(table))],
            chart_text="\n".join(chart),
            chart_svg=_svg(report),
            verdict=line,
            notes=[f"skipped {p}: {w}" for p, w in report.refused]
            + [f"{r.name}: {r.note}" for r in report.results if r.note],
        ),
    )


def sweep_scalars(report) -> list[tuple[int, str, float]]:
    """(step, tag, value) of every figure of every checkpoint, against its training step (its
    place in the order where the run names none): the accept length, the share of rounds
    accepting at least k tokens, our per-step accuracy, the closed-form estimate trainers log,
    and the trainers' own per-step metrics (with --target)."""
    out: list[tuple[int, str, float]] = []
    for x, r in zip(_x(report), report.results, strict=True):
        step = int(x)
        figures: list[tuple[str, float | None]] = [
            ("accept_length", r.accept_length),
            ("acceptance_length_estimate", r.estimate),
        ]
        figures += [(f"per_depth/{k + 1}", v) for k, v in enumerate(r.per_depth)]
        figures += [(f"all_tok_acc/step_{k}", v) for k, v in enumerate(r.step_acc)]
        for name, values in sorted(r.trainer.items()):
            figures += [(f"{name}/step_{k}", v) for k, v in enumerate(values)]
        out += [(step, f"eagle-inspect/{tag}", float(v)) for tag, v in figures if v is not None]
    return out


def _check_outside(path: Path, flag: str, inputs) -> None:
    """An output inside the run or the samples is refused before the sweep runs."""
    from inspector.input_folders import enclosing_input

    inside = enclosing_input(path.resolve(), inputs)
    if inside is not None:
        hint = " (tensorboard --logdir PARENT shows both)" if flag == "--tensorboard" else ""
        raise InputError(
            path,
            flag,
            f"inside the input folder {inside}, which is never written: give a folder beside "
            f"it{hint}",
        )


def _write_tensorboard(folder: Path, report, inputs) -> Path:
    from inspector.commands.tensorboard_events import write_scalars

    _check_outside(folder, "--tensorboard", inputs)
    try:
        return write_scalars(folder, sweep_scalars(report))
    except OSError as e:
        raise InputError(folder, "--tensorboard", f"cannot write: {e.strerror or e}") from None


def _write_chart(path: Path, flag: str, data: bytes) -> None:
    try:
        path.write_bytes(data)
    except OSError as e:
        raise InputError(path, flag, f"cannot write: {e.strerror or e}") from None


def render_sweep(report) -> Group:
    table, chart, line = sweep_parts(report)
    parts: list = [table, Text(""), Text("\n".join(chart))]
    if line:
        parts += [Text(""), Text(safe(line))]
    return Group(*parts)


def sweep_parts(report) -> tuple[Table, list[str], str | None]:
    """The table, the text chart's lines, and the line naming the best and the last."""
    from inspector.commands.sweep_plot import text_chart

    spec = report.spec
    best = report.best
    depth = spec.steps
    table = report_table(
        safe(
            f"{report.run_dir}: accept length per round as {report.engine.display} counts it "
            f"({spec.flags()}), wiring {report.wiring}, on {report.samples} samples"
        )
    )
    table.add_column("checkpoint", no_wrap=True)
    table.add_column("step", justify="right")
    table.add_column("accept len", justify="right")
    for k in range(depth):
        table.add_column(f">={k + 1}", justify="right")
    table.add_column("step-0 acc", justify="right")
    table.add_column("est.", justify="right")
    table.add_column("", no_wrap=True)
    for r in report.results:
        al = (
            "-"
            if r.accept_length is None
            else (">=" if r.is_bound else "") + fmt_float(r.accept_length)
        )
        acc0 = r.step_acc[0] if r.step_acc else None
        row = [safe(r.name), "-" if r.step is None else f"{r.step:,}", al]
        row += [pct(x) for x in r.per_depth[:depth]]
        row += ["-" if acc0 is None else pct(acc0), fmt_float(r.estimate)]
        row.append("best" if r is best else "")
        table.add_row(*row)
    table.caption = (
        "accept len: 1 + accepted / rounds, as the engine logs it; >=k: the share of rounds "
        "accepting at least k drafted tokens; step-0 acc: the draft's first-token accuracy "
        "(ours, all tokens); est.: the closed form 1 + sum_k prod cond_acc trainers log"
    )
    table.caption_justify = "left"
    labels = [r.name for r in report.results]
    chart = text_chart(
        labels,
        [r.accept_length for r in report.results],
        None if best is None else report.results.index(best),
    )
    line = None
    if best is not None and report.last is not None:
        gap = report.last_behind_best
        line = f"best: {best.name}, accept length {fmt_float(best.accept_length, 4)}"
        if report.last is best:
            line += " (the last checkpoint)"
        elif gap is not None:
            line += (
                f"; the last, {report.last.name}, gives {fmt_float(report.last.accept_length, 4)}"
                f" ({fmt_float(gap, 4)} behind)"
            )
    return table, chart, line
