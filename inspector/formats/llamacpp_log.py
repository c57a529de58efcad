"""llama.cpp's speculative-decoding figures (llama.cpp@0c1e57098, the copy llama-cpp-python 0.3.36
vendors; the acceptance metrics of PR #24536), as `engine_log` reads them:

- `llama-server`'s per-request slot line, `print_timings` (tools/server/server-context.cpp
  628-650): "draft acceptance = %0.5f (%5d accepted / %5d generated), mean len = %5.2f", then at
  trace level "acc per pos = (%s)" (each "%.3f" = the rounds accepting position i / the rounds);
  later builds print "..., mean acceptance length = 2.92, acceptance rate per position = (0.805,
  ...)" on the one line. Both are read. The line's rounds (`n_draft_verif_steps`) are not
  printed: they are the one count that gives the printed mean (1 + accepted / rounds, 2
  decimals) and per-position rates whose counts sum to the accepted tokens; where several
  counts do, the nearest to accepted / (mean - 1) is taken and the figure is a rounded one. The
  counts reset with each request (server-context.cpp): the lines are summed.
- The drafter's statistics line, `common_speculative_print_stats` (common/speculative.cpp
  2933-2975): "statistics draft-eagle3: #calls(b,g,a) = 1 87 87, #gen drafts = 87, #acc drafts =
  70, #gen tokens = 259, #acc tokens = 167, #mean acc len = 2.92, #acc rate/pos = (...)". Its
  counts are the drafter's, cumulative over the server's life (printed after every request,
  server-context.cpp): the last line per drafter counts, and a line whose counts fall below
  the one before, or the first after a server's start-up lines ("llama_server: initializing",
  "listening on", "main: build ="), starts a new run (a restart) whose last line is added: logs
  of several servers, one after another, are summed. Rounds = #gen drafts,
  accepted = #acc tokens: exact. Where the log holds these lines the slot lines are not summed.
- `/metrics` (tools/server/server-task.cpp): `llamacpp:spec_decode_num_drafts_total`,
  `..._num_draft_tokens_total`, `..._num_accepted_tokens_total` and
  `..._num_accepted_tokens_per_pos_total{position="i"}`, vLLM's schema.
- The server's per-request JSON: `timings.draft_n` (drafted tokens) and `timings.draft_n_accepted`
  (tools/server/server-common.cpp), with `prompt_token_ids` / `output_ids` (or `tokens`)
  where the caller kept them, to pair the request with a sample, and `id_slot`, the slot that
  served it. The timings do not give the request's rounds.

The build and backend each server run states (`EngineLog.starts`, an `EngineStart` per run): the
build line (`common_params_print_info: build 7000 (abc1234) with ...`, common/common.cpp; older
builds "build: N (C) with ..." or "main: build = N (C)") and the backend its devices name
("llama_model_load_from_file_impl: using device CUDA0 (...)", src/llama.cpp; else "ggml_cuda_init:
found 1 CUDA devices", else "load_backend: loaded Vulkan backend from ..."): the run's label when
several runs of one draft are compared (`reconcile_runs`).

Each slot line is kept as one request's figures too (`LlamacppLog.slot_requests`, a
`SlotFigures` each: its slot id and task id from SLT_INF's prefix "slot %12.*s: id %2d | task %d
| ", tools/server/server-common.h), in the order the requests reached the server (by server
run, then task id): a slot whose requests depart from the others' is `reconcile_blame`'s.

Every malformed line is one `InputError` naming the file and the line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from inspector.engines import Engine
from inspector.errors import InputError
from inspector.formats.engine_figures import EngineLog, EngineStart, RequestFigures

# the engines' names from the registry (a rename is one edit in inspector/engines/)
_LLAMACPP = Engine.LLAMACPP.display

__all__ = [
    "LlamacppLog",
    "SlotFigures",
    "is_llamacpp_text",
    "llamacpp_log",
    "llamacpp_request",
]

NUM = r"(?:[0-9]+(?:\.[0-9]*)?|nan|-?inf)"
SLOT_LINE = re.compile(
    rf"draft acceptance = (?P<ratio>{NUM}) \(\s*(?P<acc>\d+) accepted /\s*(?P<gen>\d+) generated\)"
    rf"(?:, mean (?:acceptance length|len) =\s*(?P<mean>{NUM}))?"
    r"(?:, acceptance rate per position = \((?P<rates>[^)]*)\))?"
)
# a server starting (a new run of cumulative statistics): llama-server's first line, its
# listening line, and the build line older builds print first
START_LINE = re.compile(
    r"llama_server: initializing|server is listening on|listening on http|main: build ="
)
# SLT_INF's prefix: the slot and the task (the request) a slot line is about
SLOT_ID = re.compile(r"\bid\s*(?P<slot>\d+) \| task (?P<task>\d+) \|")
# a server run's build and backend (the module docstring)
INIT_LINE = re.compile(r"llama_server: initializing|main: build =")
BUILD_LINE = re.compile(r"\bbuild(?: =|:)? (?P<n>\d+) \((?P<commit>[0-9a-f]{6,40})\)")
DEVICE_LINE = re.compile(r"using device (?P<dev>[A-Za-z]+)\d* \(")
FOUND_LINE = re.compile(r"\b[Ff]ound \d+ (?P<dev>[A-Za-z]+) devices")
LOADED_LINE = re.compile(r"load_backend: loaded (?P<dev>[A-Za-z]+) backend from")
POS_LINE = re.compile(r"acc per pos = \((?P<rates>[^)]*)\)")
STATS_LINE = re.compile(
    r"statistics\s+(?P<impl>\S+): #calls\(b,g,a\) =\s*\d+\s+\d+\s+(?P<calls>\d+), "
    r"#gen drafts =\s*(?P<drafts>\d+), #acc drafts =\s*\d+, #gen tokens =\s*(?P<gen>\d+), "
    r"#acc tokens =\s*(?P<acc>\d+)"
    rf"(?:, #mean acc len =\s*(?P<mean>{NUM}), #acc rate/pos = \((?P<rates>[^)]*)\))?"
)


@dataclass
class SlotFigures(RequestFigures):
    """One llama-server request's figures with the slot that served it (None: not logged)."""

    slot: int | None = None
    task: int | None = None  # llama-server's task id (a slot line's), in arrival order


@dataclass
class LlamacppLog(EngineLog):
    """llama-server's log: the pooled figures, and each slot line as one request's."""

    # the slot lines' requests in arrival order (server run, then task id); rounds as
    # `_rounds` pins them (`rounded`: some are the nearest count)
    slot_requests: list[SlotFigures] = field(default_factory=list)


def is_llamacpp_text(lines: list[str]) -> bool:
    return any("draft acceptance =" in ln or "#gen drafts =" in ln for ln in lines)


def _rates(path: Path, no: int, text: str | None) -> list[str] | None:
    if text is None:
        return None
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not all(re.fullmatch(r"[0-9]+\.[0-9]{3}", x) for x in items):
        raise InputError(path, f"line {no}", f"acceptance rates per position ({text}) unreadable")
    return items


def _rounds(acc: int, gen: int, mean: str | None, rates: list[str] | None) -> tuple[int, bool]:
    """(rounds, exact) of one slot line: the counts that print its mean and rates."""
    lo = max(1, -(-gen // max(len(rates or []), 1)) if rates else 1)
    if acc == 0 and not rates:
        return lo, False
    cands = []
    for s in range(lo, gen + 1):
        if mean is not None and f"{1 + acc / s:.2f}" != f"{float(mean):.2f}":
            continue
        if rates:
            counts = [round(float(r) * s) for r in rates]
            if any(f"{c / s:.3f}" != r for c, r in zip(counts, rates, strict=True)):
                continue
            if sum(counts) != acc:
                continue
        cands.append(s)
    if len(cands) == 1:
        return cands[0], True
    guess = acc / (float(mean) - 1) if mean is not None and float(mean) > 1 else lo
    pool = cands or [max(lo, round(guess))]
    return min(pool, key=lambda s: abs(s - guess)), False


def llamacpp_log(path: Path, lines: list[str]) -> EngineLog:
    """llama-server's slot lines and the drafter's statistics lines (the module docstring)."""
    out = LlamacppLog(path, Engine.LLAMACPP, "log")
    run = 0  # server start-ups seen: a restarted server numbers its tasks again
    stats: dict[str, list[tuple[int, int, int]]] = {}  # drafter -> runs' last (drafts, acc, gen)
    started: set[str] = set()  # drafters with a line since the last server start
    slots: list[list] = []  # [line, accepted, generated, mean, rates]
    ids_of: list[tuple[int, int | None, int | None]] = []  # each slot line's (run, task, slot)
    builds = _Builds(path)
    for no, ln in enumerate(lines, start=1):
        builds.read(no, ln)
        if START_LINE.search(ln):
            started.clear()
            run += 1
            continue
        if "#gen drafts =" in ln:
            m = STATS_LINE.search(ln)
            if m is None:
                raise InputError(path, f"line {no}", "a truncated or unknown statistics line")
            _rates(path, no, m["rates"])
            now = (int(m["drafts"]), int(m["acc"]), int(m["gen"]))
            runs = stats.setdefault(m["impl"], [])
            same = m["impl"] in started
            if runs and same and all(x >= y for x, y in zip(now, runs[-1], strict=True)):
                runs[-1] = now
            else:
                runs.append(now)
            started.add(m["impl"])
            continue
        if "draft acceptance =" in ln:
            m = SLOT_LINE.search(ln)
            if m is None or m["mean"] == "nan":
                raise InputError(
                    path, f"line {no}", "a truncated or unknown 'draft acceptance' line"
                )
            slots.append(
                [no, int(m["acc"]), int(m["gen"]), m["mean"], _rates(path, no, m["rates"])]
            )
            ids = SLOT_ID.search(ln, 0, m.start())
            ids_of.append(
                (run, int(ids["task"]) if ids else None, int(ids["slot"]) if ids else None)
            )
            continue
        if "acc per pos =" in ln:
            m = POS_LINE.search(ln)
            if m is None or not slots or slots[-1][4] is not None:
                raise InputError(path, f"line {no}", "an 'acc per pos' line without its request's")
            slots[-1][4] = _rates(path, no, m["rates"])
    if stats:
        runs = [r for rs in stats.values() for r in rs]
        out.rounds = sum(d for d, _, _ in runs)
        out.accepted = sum(a for _, a, _ in runs)
        out.drafted_tokens = sum(g for _, _, g in runs)
        out.lines = len(runs)
        out.note = f"{_LLAMACPP}'s drafter statistics ({', '.join(sorted(stats))}): exact counts"
    else:
        exact = True
        rounds = acc = gen = 0
        per_pos: list[int] | None = []
        for no, a, g, mean, rates in slots:
            if mean is None and not rates:
                raise InputError(path, f"line {no}", "neither a mean length nor per-position rates")
            n, ok = _rounds(a, g, mean, rates)
            exact &= ok
            rounds, acc, gen = rounds + n, acc + a, gen + g
            if per_pos is not None and rates:
                counts = [round(float(r) * n) for r in rates]
                if per_pos and len(per_pos) != len(counts):
                    raise InputError(path, f"line {no}", "a request with other positions")
                per_pos = [x + y for x, y in zip(per_pos or [0] * len(counts), counts, strict=True)]
            else:
                per_pos = None
        out.rounds, out.accepted, out.drafted_tokens, out.lines = rounds, acc, gen, len(slots)
        out.accepted_per_pos = per_pos or None
        out.rounded = not exact
        if not exact:
            out.note = (
                "some requests' rounds are not pinned by their printed mean and rates: the "
                "nearest count was taken, the figure is a rounded one"
            )
    arrived = []  # (server run, task id, the request): the order requests reached the server
    for (no, a, g, mean, rates), (run_no, task, slot) in zip(slots, ids_of, strict=True):
        req = SlotFigures(f"{path.name}:{no}", no, slot=slot, task=task)
        req.accepted, req.drafted_tokens = a, g
        if mean is not None or rates:
            req.rounds = _rounds(a, g, mean, rates)[0]
        arrived.append((run_no, task, req))
    if all(task is not None for _, task, _ in arrived):
        arrived.sort(key=lambda x: (x[0], x[1]))
    out.slot_requests = [req for _, _, req in arrived]
    out.starts = builds.starts()
    if out.accepted_per_pos:
        out.steps = len(out.accepted_per_pos)
    out.accept_length = 1 + out.accepted / out.rounds if out.rounds else None
    return out


class _Builds:
    """Each server run's build and backend, as its start-up lines state them."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.runs: list[dict] = []

    def _run(self) -> dict:
        if not self.runs:
            self.runs.append(self._empty())
        return self.runs[-1]

    @staticmethod
    def _empty() -> dict:
        return {"where": None, "n": None, "commit": None, "using": [], "found": [], "loaded": []}

    def read(self, no: int, ln: str) -> None:
        if INIT_LINE.search(ln):
            run = self._run()
            if run["n"] is not None or run["using"] or run["found"] or run["loaded"]:
                self.runs.append(self._empty())
        m = BUILD_LINE.search(ln)
        if m is not None:
            run = self._run()
            if run["n"] is None:
                run["n"], run["commit"] = m["n"], m["commit"]
                run["where"] = f"{self.path.name}:{no}"
            return
        for key, pattern in (
            ("using", DEVICE_LINE),
            ("found", FOUND_LINE),
            ("loaded", LOADED_LINE),
        ):
            m = pattern.search(ln)
            if m is not None:
                run = self._run()
                run[key].append(m["dev"])
                run["where"] = run["where"] or f"{self.path.name}:{no}"
                return

    def starts(self) -> list[EngineStart]:
        out = []
        for run in self.runs:
            gpu = [d for d in run["loaded"] if d.upper() != "CPU"]
            devices = run["using"] or run["found"] or gpu or run["loaded"]
            if run["where"] is None:
                continue
            out.append(
                EngineStart(
                    run["where"],
                    f"b{run['n']}" if run["n"] is not None else "",
                    device="+".join(dict.fromkeys(devices)) or None,
                    engine=Engine.LLAMACPP,
                    commit=run["commit"],
                )
            )
        return out


def llamacpp_request(path: Path, no: int, entry: dict, ints, count) -> RequestFigures | None:
    """One llama-server response's `timings` (None: the entry is not one). `ints` and `count`
    read a list of token ids and one count, refusing what is not (engine_log's readers)."""
    timings = entry.get("timings")
    if not isinstance(timings, dict) or "draft_n" not in timings:
        return None
    slot = entry.get("id_slot")
    r = SlotFigures(f"{path.name}:{no}", no)
    if isinstance(slot, int) and not isinstance(slot, bool) and slot >= 0:
        r.slot = slot
    r.drafted_tokens = count(path, no, "timings.draft_n", timings.get("draft_n"))
    r.accepted = count(path, no, "timings.draft_n_accepted", timings.get("draft_n_accepted"))
    if r.accepted is None:
        raise InputError(path, f"line {no}", "timings.draft_n without draft_n_accepted")
    if r.drafted_tokens is not None and r.accepted > r.drafted_tokens:
        raise InputError(path, f"line {no}", "timings: more tokens accepted than drafted")
    r.prompt_ids = ints(path, no, "prompt_token_ids", entry.get("prompt_token_ids"))
    for key in ("output_ids", "output_token_ids", "tokens"):
        if entry.get(key) is not None:
            r.output_ids = ints(path, no, key, entry.get(key))
            break
    return r
