"""`eagle-inspect doctor`: findings first, then the ranked wirings and the serving config.

Exit status: 0 when no finding is an error, 1 when one is (or --write-fixed did not verify), 2 on
unusable inputs (like every command).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from inspector.commands.common import (
    load_evaluator,
    print_load_notes,
    print_sample_notes,
    resolve_inputs,
)
from inspector.commands.exit_codes import ExitCode
from inspector.commands.output import report_table, safe, stdout_console, visible, write_json
from inspector.engines import Engine
from inspector.formatting import SEVERITY_STYLE
from inspector.progress import stage_progress_bar

if TYPE_CHECKING:
    from inspector.doctor import DoctorReport, Finding, FixResult
    from inspector.evaluate import Evaluator


def run_doctor(args: argparse.Namespace) -> int:
    """Parse, run the doctor's pipeline (the app's doctor screen runs the same), print."""
    from inspector.commands.arguments import expectation_settings
    from inspector.doctor import DoctorRequest, run
    from inspector.engines import default_engine

    err = Console(stderr=True)
    source = Path(args.source) if getattr(args, "source", None) else None
    if source is not None:
        _check_source(args.checkpoint, source)
        if not args.samples and not args.prompts:  # the conversion alone: no samples to score
            return _emit(args, _conversion_report(args, source), err)
    from inspector.formats.block_config import block_draft_family

    if block_draft_family(args.checkpoint) is not None:
        from inspector.commands.doctor_block import block_doctor_report

        parent = _parent_diff(args.checkpoint, args)  # a bad --parent fails before the run
        report = block_doctor_report(args, err)
        if parent is not None:
            from inspector.doctor.pipeline import with_finding

            with_finding(report, parent)
        return _emit(args, report, err)
    inputs = resolve_inputs(args)
    parent = _parent_diff(inputs.checkpoint, args)
    # the wiring finding quotes a chain's accept length, as vLLM's default (a chain) verifies it
    sampling = (
        expectation_settings(args, default_engine(True), chain=True)
        if args.temperature > 0
        else None
    )
    request = DoctorRequest(
        inputs.checkpoint,
        target=inputs.target,
        n_samples=args.n_samples,  # the parser enforces >= 1
        max_tokens=args.max_tokens,
        write_fixed=args.write_fixed,
        embed=inputs.embed,
        read=tuple(inputs.paths()),
        sampling=sampling,
        target_dtype=args.dtype,
        engines=tuple(args.engine) if args.engine else None,
        trace=getattr(args, "trace", None),
    )

    loaded: list[Evaluator] = []

    def load(checkpoint: Path) -> Evaluator:
        # Lenient: a faulty d2t or a missing head_dim become findings instead of load errors.
        # --slot-layers reaches the doctor through the evaluator (inputs.slot_layers).
        ev = load_evaluator(
            replace(inputs, checkpoint=checkpoint),
            device=args.device,
            dtype=args.dtype,
            ttt_steps=args.ttt_steps,
            strict=False,
            memory_budget=args.memory_budget,
        )
        print_load_notes(err, inputs, ev)
        if getattr(args, "trace", None) is not None:  # a sample not in the set fails now
            from inspector.doctor.trace.build import pick_sample

            pick_sample(inputs.samples[0], args.trace, len(ev.samples))
        loaded.append(ev)
        return ev

    with stage_progress_bar(err) as advance:
        report = run(request, load, progress=advance)
    if getattr(args, "parent", None) and loaded:
        from inspector.doctor.pipeline import with_finding

        if parent is not None:
            with_finding(report, parent)
        for f in _parent_findings(Path(args.parent), inputs, loaded[-1], report):
            with_finding(report, f)
    if source is not None and loaded:
        from inspector.doctor.pipeline import with_finding

        finding = _conversion_finding(
            inputs.checkpoint, source, inputs.target, inputs.embed, loaded[0], report.sample_indices
        )
        with_finding(report, finding)
    return _emit(args, report, err)


def _parent_diff(checkpoint: str | Path, args: argparse.Namespace) -> Finding | None:
    """What CKPT changed or dropped against --parent, capture ids first
    (`doctor.checks.parent_diff`); None without --parent."""
    if not getattr(args, "parent", None):
        return None
    from inspector.formats.checkpoint import is_gguf

    if is_gguf(checkpoint) or is_gguf(args.parent):  # the vocab_moved finding alone
        return None
    from inspector.doctor.checks.parent_diff import diff_against_parent, parent_diff_finding

    return parent_diff_finding(diff_against_parent(checkpoint, args.parent))


def _parent_findings(parent: Path, inputs, ev: Evaluator, report: DoctorReport) -> list[Finding]:
    """Whether the vocabulary map moved against --parent's (`doctor.checks.vocab_moved`), both maps
    scored on the doctor's samples under its recommended wiring; for a quantized draft, what the
    quantization costs against the parent there (`doctor.checks.quantization_cost`)."""
    from inspector.doctor.checks.vocab_moved import compare_maps, score_maps, vocab_moved_finding
    from inspector.formats import load_draft

    other = load_draft(
        parent,
        target=inputs.target,
        embed=inputs.embed,
        dtype=ev.draft.dtype,
        device=ev.draft.device,
        strict=False,
    )
    facts = compare_maps(ev.draft, other)
    wiring = report.recommended_wiring or report.best_wiring
    if wiring:
        facts = score_maps(facts, ev, other, report.sample_indices, tuple(wiring))
    out = [vocab_moved_finding(facts)]
    if ev.draft.quantization is not None and wiring:
        from inspector.doctor.checks.quantization_cost import (
            measure_quantization_cost,
            quantization_cost_finding,
        )

        cost = measure_quantization_cost(ev, other, report.sample_indices, wiring)
        out.append(quantization_cost_finding(cost))
    return out


def _check_source(checkpoint: str | None, source: Path) -> None:
    """--source: one side a .gguf file, the other the HF draft folder it was converted from."""
    from inspector.errors import InputError
    from inspector.formats.checkpoint import is_gguf

    if checkpoint is None or is_gguf(checkpoint) == is_gguf(source):
        raise InputError(
            source,
            "--source",
            f"compares a {Engine.LLAMACPP.display} conversion: one of CKPT and --source a .gguf "
            "file, the other the HF draft folder it was converted from",
        )


def _conversion_finding(
    checkpoint: Path,
    source: Path,
    target: Path | None,
    embed: Path | None,
    ev: Evaluator | None,
    samples: list[int],
) -> Finding:
    """What the conversion between CKPT and --source changed (`doctor.checks.gguf_conversion`); with the
    doctor's evaluator, the step-0 accuracy of both drafts on its samples."""
    from inspector.doctor.checks.gguf_conversion import conversion_finding
    from inspector.formats import load_draft
    from inspector.formats.checkpoint import is_gguf

    if ev is not None and Path(ev.draft.path) == Path(checkpoint):
        own = ev.draft
    else:  # the doctor scored a copy (a borrowed head), or nothing
        own = load_draft(checkpoint, target=target, embed=embed, strict=False)
    other = load_draft(
        source, target=target, embed=embed, dtype=own.dtype, device=own.device, strict=False
    )
    gguf, hf = (own, other) if is_gguf(checkpoint) else (other, own)
    return conversion_finding(gguf, hf, target=target, ev=ev, samples=samples)


def _conversion_report(args: argparse.Namespace, source: Path) -> DoctorReport:
    """`doctor CKPT --source PATH` without samples: the conversion finding alone."""
    from inspector.doctor import DoctorReport

    target = Path(args.target) if args.target and args.target != "auto" else None
    embed = Path(args.embed) if args.embed else None
    checkpoint = Path(args.checkpoint)
    finding = _conversion_finding(checkpoint, source, target, embed, None, [])
    return DoctorReport(
        best_wiring=(),
        wirings=[],
        findings=[finding],
        serving_config=None,
        checkpoint=str(checkpoint),
    )


def _emit(args: argparse.Namespace, report: DoctorReport, err: Console) -> int:
    """Print the report (JSON or tables); the exit status."""
    # Named on stderr as eval does (and in the report's findings and JSON).
    print_sample_notes(err, report.skipped, report.warnings)
    if args.json:
        write_json(report.to_dict())
    else:
        out = stdout_console()
        for part in render(report):
            out.print(part)
    failed = report.fixed is not None and not report.fixed.verified
    return ExitCode.PROBLEM if failed or report.has_errors else ExitCode.OK


def render(report: DoctorReport) -> list:
    """The rich renderables of the report: findings first."""
    infos = report.slots
    parts: list = []
    slots = ", ".join(
        f"{i}={s.label}"
        + (f" (HF {s.hf_index})" if s.hf_index is not None and s.label != f"L{s.hf_index}" else "")
        for i, s in enumerate(infos)
    )
    read = (
        f" ({report.plan.summary()})" if report.plan is not None and report.plan.summary() else ""
    )
    scope = (
        f"  on {len(report.sample_indices)} samples{read}; slots {slots}" if report.wirings else ""
    )
    head = Text.assemble(("eagle-inspect doctor", "bold"), visible(f"  {report.checkpoint}{scope}"))
    if report.pairing_shift:
        head.append(f"; pairing shifted by {report.pairing_shift:+d}", style="yellow")
    parts.append(head)
    for f in report.findings:
        title = Text.assemble(
            (f"{f.severity.upper():7}", SEVERITY_STYLE.get(f.severity, "")), (f" {f.kind}", "bold")
        )
        body = [Text(visible(f.summary))]
        body += [Text.assemble(("- ", "dim"), visible(line)) for line in f.lines]
        if f.fix:
            body.append(Text.assemble(("fix: ", "bold green"), visible(f.fix)))
        parts.append(
            Panel(
                Group(*body),
                title=title,
                title_align="left",
                border_style=SEVERITY_STYLE.get(f.severity, ""),
                expand=True,
            )
        )
    if report.wirings:  # none when no check could score the draft (a draft without a head)
        parts.append(_wiring_table(report))
        parts.append(_serving_panel(report))
    if report.fixed is not None:
        parts.append(_fixed_panel(report.fixed))
    return parts


def _wiring_table(report: DoctorReport, top: int = 8) -> Table:
    table = report_table(
        "wirings by step-0 all-tok accuracy (fc block 0, 1, ... <- slot; log p: mean log-prob of the true token)"
    )
    table.add_column("#", justify="right")
    table.add_column("wiring", no_wrap=True)
    table.add_column("slots", no_wrap=True)
    table.add_column("all-tok", justify="right", no_wrap=True)
    table.add_column("log p", justify="right", no_wrap=True)
    table.add_column("")
    rec = report.serve_wiring
    shown = [(i, w) for i, w in enumerate(report.wirings) if i < top or w.roles or w.wiring == rec]
    for i, w in shown:
        note = list(w.roles)
        if w.wiring == rec:
            note.insert(0, "recommended")
        if not w.complete:
            note.append(f"dropped after {w.samples} samples")
        lp = "-" if w.mean_logp is None else f"{w.mean_logp:.2f}"
        style = "bold" if w.wiring == rec else None
        table.add_row(
            str(i + 1),
            safe(w.label),
            ",".join(map(str, w.wiring)),
            w.all_tok.fmt(),
            lp,
            ", ".join(note),
            style=style,
        )
    hidden = len(report.wirings) - len(shown)
    if hidden > 0:
        table.caption = f"{hidden} more wirings not shown (--json lists all)"
    return table


def _serving_panel(report: DoctorReport) -> Panel:
    sc = report.serving_config
    assert sc is not None  # a report with wirings has a serving config
    lines: list = []
    if sc.ascending is None or sc.engines is None:
        lines.append(Text("; ".join(sc.problems)))
        return Panel(Group(*lines), title="serving config", title_align="left")
    for p in sc.problems:
        lines.append(Text(p, style="red"))
    if sc.configs_for:
        lines.append(Text(f"for {sc.configs_for}:", style="bold"))
    from inspector.engines import Engine

    for which, e in ((Engine.VLLM, sc.engines.vllm), (Engine.SGLANG, sc.engines.sglang)):
        lines.append(Text(which.value, style="bold"))
        lines.append(Text("  config.json: " + json.dumps(e.config)))
        lines.append(Text("  " + e.launch, style="dim"))
        for n in e.notes:
            lines.append(Text("  - " + n))
    return Panel(
        Group(*lines),
        title=f"serving config for HF layers {sorted(k for k in sc.hf_indices if k is not None)}",
        title_align="left",
    )


def _fixed_panel(fixed: FixResult) -> Panel:
    ok = fixed.verified
    v = fixed.verification
    e, f = v.expected, v.fixed
    lines = [
        Text(visible(f"wrote {fixed.path}")),
        *[Text("  - " + c) for c in fixed.changes],
        Text(
            f"verified: ascending wiring {list(fixed.plan.fixed_wiring)} scores {f.hits}/{f.total} "
            f"vs {e.hits}/{e.total} for the original ({v.positions_differing} positions differ)",
            style="green" if ok else "bold red",
        ),
    ]
    return Panel(
        Group(*lines),
        title="--write-fixed " + ("verified" if ok else "NOT verified"),
        title_align="left",
    )
