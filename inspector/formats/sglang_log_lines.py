"""SGLang's decode log lines ("Decode batch, #running-req: 8, ..., accept len: 2.31, ..."),
pooled as the engine pools them: `engine_log`'s module docstring has the source lines."""

from __future__ import annotations

import re
from pathlib import Path

from inspector.engines import Engine
from inspector.errors import InputError
from inspector.formats.engine_figures import EngineLog, WindowFigures

# the engines' names from the registry (a rename is one edit in inspector/engines/)
_SGLANG = Engine.SGLANG.display

SGLANG_LINE = re.compile(r"(?<!block )accept len: (?P<len>[0-9.]+|nan)")
SGLANG_RUNNING = re.compile(r"#running-req: (?P<n>\d+)")
SGLANG_GRAPH = re.compile(r"\b(cpu|cuda|npu|xpu) graph: ")
# the start-up line's `server_args={... 'decode_log_interval': 40, ...}` (0.5.23: a dict; older
# releases: `ServerArgs(..., decode_log_interval=40, ...)`)
SGLANG_INTERVAL = re.compile(r"""\bdecode_log_interval['"]?\s*[:=]\s*(?P<n>\d+)""")


def sglang_log(path: Path, lines: list[str], interval: int | None = None) -> EngineLog:
    """SGLang's decode log lines, pooled as the engine pools them (see the module docstring)."""
    if interval is not None and interval < 1:
        raise InputError(path, "decode_log_interval", f"{interval}: expected a positive number")
    logged: dict[int, int] = {}  # decode_log_interval -> the start-up line stating it
    rows: list[tuple[int, str, int | None]] = []  # (line, accept len as printed, #running-req)
    for no, ln in enumerate(lines, start=1):
        if "server_args=" in ln and (m := SGLANG_INTERVAL.search(ln)) is not None:
            logged.setdefault(int(m["n"]), no)
        if "accept len:" not in ln:
            continue
        m = SGLANG_LINE.search(ln)
        if m is None or m["len"] == "nan":
            raise InputError(path, f"line {no}", "an 'accept len' without a number")
        r = SGLANG_RUNNING.search(ln, 0, m.start())
        n = int(r["n"]) if r is not None else None
        if n == 0:
            raise InputError(path, f"line {no}", "a decode line with #running-req: 0")
        rows.append((no, m["len"], n))
    if len(logged) > 1:
        stated = ", ".join(f"{v} (line {no})" for v, no in sorted(logged.items()))
        raise InputError(path, None, f"the start-up lines state decode_log_interval {stated}")
    if logged:
        ((stated_interval, no),) = logged.items()
        if interval is not None and interval != stated_interval:
            raise InputError(
                path,
                f"line {no}",
                f"decode_log_interval {stated_interval}, but {interval} was given",
            )
        interval = stated_interval
    out = EngineLog(
        path, Engine.SGLANG, "log", lines=len(rows), rounded=True, decode_log_interval=interval
    )
    out.windows = [WindowFigures(f"{path.name}:{no}", no, text, n) for no, text, n in rows]
    graphs = {g for ln in lines for g in SGLANG_GRAPH.findall(ln)}
    if len(graphs) == 1:  # the decode lines' "cpu graph: ..." or "cuda graph: ..."
        out.device = graphs.pop()
    values = [float(v) for _, v, _ in rows]
    if any(n is None for _, _, n in rows):
        missing = sum(n is None for _, _, n in rows)
        out.accept_length = sum(values) / len(values)
        out.weighting = "unweighted"
        out.note = (
            f"{missing} of {len(rows)} 'accept len' lines state no #running-req: the lines are "
            f"averaged unweighted, where {_SGLANG} weights each by its rounds"
        )
        return out
    weights = [n for _, _, n in rows if n is not None]
    out.weighting = "running-req"
    out.accept_length = sum(v * n for v, n in zip(values, weights, strict=True)) / sum(weights)
    if interval != 1:
        window = (
            f"{interval} decode iterations"
            if interval is not None
            else "decode_log_interval decode iterations (default 40; the log does not say)"
        )
        out.note = (
            f"each line covers {window} and states the batch size of its last: weighted by it, "
            "the pooled figure is approximate where the batch changed within a window"
        )
        return out
    counts = [_one_iteration(text, n) for (_, text, n) in rows if n is not None]
    unknown = [no for (no, _, _), c in zip(rows, counts, strict=True) if c is None]
    if unknown:
        out.note = (
            f"decode_log_interval 1, but {len(unknown)} of {len(rows)} lines (the first at line "
            f"{unknown[0]}) do not pin one count of correct drafts at their #running-req: "
            "weighted by #running-req, the figure is exact to the lines' rounding"
        )
        return out
    out.rounds = sum(weights)
    out.accepted = sum(c for c in counts if c is not None)
    out.accept_length = 1 + out.accepted / out.rounds
    out.rounded = False
    out.note = (
        "decode_log_interval 1: each line is one decode iteration, its rounds the running "
        "requests and its correct drafts the one count its accept len prints"
    )
    return out


def _one_iteration(text: str, bs: int) -> int | None:
    """The correct drafts of one decode iteration at batch size `bs` that SGLang prints as
    `accept len: {text}` (`f"{(correct + bs) / bs:.2f}"`), when exactly one count does."""
    value = float(text)
    lo = max(0, int((value - 1 - 0.006) * bs))
    hits = [
        c for c in range(lo, int((value - 1 + 0.006) * bs) + 2) if f"{(c + bs) / bs:.2f}" == text
    ]
    return hits[0] if len(hits) == 1 else None
