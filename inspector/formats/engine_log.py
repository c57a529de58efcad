"""What a serving engine logged about speculative decoding, read from any of the files users have.

- vLLM's log: "SpecDecoding metrics: Mean acceptance length: 2.06, Accepted throughput: ...,
  Drafted throughput: ..., Accepted: 526 tokens, Drafted: 1485 tokens, Per-position acceptance
  rate: 0.600, 0.300, 0.162, Avg Draft acceptance rate: 35.4%" once per stats interval (the counts
  reset after each line). Several lines are pooled by their counts; drafts = drafted tokens / k
  (k: the number of per-position rates; vLLM drafts k tokens a round unless a token budget trims
  them). Where the log holds the engine's start-up ("Initializing a V1 LLM engine (v0.32.0) with
  config: model=..., speculative_config=SpeculativeConfig(method='eagle3', model=...,
  num_spec_tokens=3), ..., device_config=cpu, ..."), the build and its speculative config are
  read too: some builds are known to verify wrong (`doctor.reconcile.known_faults`).
- vLLM's Prometheus text (`/metrics`): the cumulative counters `vllm:spec_decode_num_drafts`,
  `vllm:spec_decode_num_draft_tokens`, `vllm:spec_decode_num_accepted_tokens` (`_total` suffix
  as prometheus_client writes counters) and `..._num_accepted_tokens_per_pos{position="i"}`,
  summed over label sets (engines, models).
- vLLM per request, JSON lines: `spec_decode_metrics` (`CompletionOutput.spec_decode_metrics
  .to_dict()`, or the keys at the top level) with `per_step_accepted` (one count per round),
  optionally `per_step_drafted` (each round's drafted count: the engine's own schedule, which
  the replay then drafts; vLLM 0.32 `RequestSpecDecodeMetrics`, v1/metrics/stats.py, with
  `num_spec_tokens`, its k) and `prompt_token_ids` / `output_token_ids` to match the request with
  a sample. A 0 in `per_step_drafted` is a round that drafted nothing: no draft, not counted
  (vLLM records a round only where the request had draft tokens scheduled, v1/core/sched/
  scheduler.py, so its own lists hold none; a log that keeps such rounds places them).
- SGLang's log: "[2026-12-01 16:30:02] Decode batch, #running-req: 8, #token: 900, token usage:
  0.01, accept len: 2.31, accept rate: 0.44, cuda graph: True, gen throughput (token/s): 300.10,
  #queue-req: 0" once per `decode_log_interval` decode iterations (default 40). SGLang 0.5.23
  adds, per decode iteration, the batch size to its round count and `correct drafts + batch size`
  to its token count (`update_spec_metrics`, srt/managers/scheduler_components/metrics_reporter.py
  543-555, called with `batch.batch_size()` in batch_result_processor.py; the tokens are
  `get_num_generated_tokens`, srt/managers/utils.py); every `decode_log_interval`-th
  iteration (metrics_reporter.py) it prints `#running-req: len(batch.reqs)` of that
  iteration's batch (946, 963) and `accept len: tokens / rounds` with two decimals (973, 1005),
  then adds both to its lifetime sums and resets them (999-1004). Its pooled
  `avg_spec_accept_length` is the tokens over the rounds of those sums, so the lines are pooled
  weighted by their rounds: `#running-req` stands for them (exactly with one iteration a line;
  otherwise the window's last batch size, the window's length being the same for every line).
  With `decode_log_interval` 1 (read from the start-up line `server_args={...,
  'decode_log_interval': 1, ...}`, srt/entrypoints/engine.py, or given) a line is one
  iteration: its rounds are `#running-req` and its correct drafts the one count that prints as
  its `accept len`, so the counts are exact where every line pins one count (always below 100
  running requests). Lines without `#running-req` are averaged unweighted.
- SGLang per request, JSON lines with `meta_info` (or its keys at the top level):
  `spec_verify_ct` (verify rounds, the one after the stop not counted), `spec_num_correct_drafts`
  (accepted drafts, uncut), `completion_tokens`, `spec_accept_length` (= completion_tokens /
  spec_verify_ct, the prefill's token included); without `spec_num_correct_drafts` the figure is
  that per-request one. SGLang's server info (`internal_states[*].avg_spec_accept_length`).

Where a text log says the engine's draft length adapts (`engine_settings`), a vLLM log line's
drafts are no longer its drafted tokens / k: each line is then weighted by the drafts its mean
gives (accepted / (mean - 1)) and the pooled figure is a rounded one.

llama.cpp's slot and statistics lines, `/metrics` text and per-request `timings`:
`llamacpp_log`.

Every malformed or truncated entry is one `InputError` naming the file and the line.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from inspector.engines import REGISTRY, Engine, engine, engine_words
from inspector.errors import InputError
from inspector.formats.engine_figures import EngineLog, EngineStart, RequestFigures
from inspector.formats.engine_settings import adaptive_reason
from inspector.formats.files import check_regular
from inspector.formats.llamacpp_log import (
    is_llamacpp_text,
    llamacpp_log,
    llamacpp_request,
)
from inspector.formats.sglang_log_lines import sglang_log
from inspector.formats.spec_counters import COUNTERS, spec_counters

# the engines' names from the registry (a rename is one edit in inspector/engines/)
_LLAMACPP, _SGLANG, _VLLM = (
    Engine.LLAMACPP.display,
    Engine.SGLANG.display,
    Engine.VLLM.display,
)

__all__ = ["EngineLog", "EngineStart", "RequestFigures", "read_engine_log"]

MAX_BYTES = 256 << 20  # an engine log larger than this is not read whole

VLLM_LINE = re.compile(
    r"SpecDecoding metrics: Mean acceptance length: (?P<mean>[0-9.]+|nan), "
    r"Accepted throughput: [0-9.]+ tokens/s, Drafted throughput: [0-9.]+ tokens/s, "
    r"Accepted: (?P<accepted>\d+) tokens, Drafted: (?P<drafted>\d+) tokens, "
    r"Per-position acceptance rate: (?P<rates>[0-9., ]*?), "
    r"Avg Draft acceptance rate: (?P<avg>[0-9.]+|nan)%"
)
VLLM_START = re.compile(r"Initializing a V1 LLM engine \(v(?P<version>[^)\s]+)\) with config: ")
VLLM_SPEC = re.compile(
    r"speculative_config=SpeculativeConfig\(method='(?P<method>[^']*)', model='(?P<model>[^']*)', "
    r"num_spec_tokens=(?P<k>\d+)"
)
VLLM_DEVICE = re.compile(r"device_config=(?P<device>[A-Za-z_]+)")


def read_engine_log(path: str | Path, *, decode_log_interval: int | None = None) -> EngineLog:
    """Read whatever engine figures `path` holds (see the module docstring).

    decode_log_interval: SGLang's `--decode-log-interval` for a log that does not hold its
    start-up line (a log that does and says otherwise is refused)."""
    path = Path(path)
    check_regular(path)
    try:
        if path.stat().st_size > MAX_BYTES:
            raise InputError(path, None, f"larger than {MAX_BYTES >> 20} MiB: not an engine log")
        raw = path.read_bytes()
    except OSError as e:
        raise InputError(path, None, f"cannot read: {e.strerror or e}") from e
    text = raw.decode("utf-8", errors="replace")
    lines = text.splitlines()
    first = next((ln.strip() for ln in lines if ln.strip()), "")
    if first.startswith("{") or (first.startswith("[") and _is_json(text)):
        return _json_entries(path, text, lines)
    for which, pattern in COUNTERS.items():
        if any(pattern.match(ln) for ln in lines):
            return spec_counters(path, lines, which)
    if is_llamacpp_text(lines):
        return llamacpp_log(path, lines)
    if any("SpecDecoding metrics:" in ln for ln in lines):
        return _vllm_log(path, lines, adaptive_reason(path, lines))
    if any("accept len:" in ln for ln in lines):
        out = sglang_log(path, lines, decode_log_interval)
        out.adaptive = adaptive_reason(path, lines)
        return out
    raise InputError(
        path,
        None,
        f"no speculative-decoding figures found: expected {_VLLM}'s 'SpecDecoding metrics' log "
        f"lines, its Prometheus text, per-request JSON lines (spec_decode_metrics, {_SGLANG} "
        f"meta_info or {_LLAMACPP} timings), {_SGLANG}'s 'accept len' log lines or its server "
        f"info, {_LLAMACPP}'s 'draft acceptance' or statistics lines or its /metrics",
    )


def _is_json(text: str) -> bool:
    """A JSON array, not a log whose lines start with a bracketed timestamp."""
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _vllm_log(path: Path, lines: list[str], adaptive: str | None = None) -> EngineLog:
    out = EngineLog(path, Engine.VLLM, "log", rounded=True, adaptive=adaptive)
    acc = drafted = drafts = 0
    weighted = weights = 0.0  # adaptive: the lines' means weighted by the drafts each gives
    per_pos: list[float] | None = None
    for no, ln in enumerate(lines, start=1):
        if "Initializing a V1 LLM engine" in ln:
            start = _vllm_start(path, no, ln)
            if start is not None:
                out.starts.append(start)
            continue
        if "SpecDecoding metrics:" not in ln:
            continue
        m = VLLM_LINE.search(ln)
        if m is None:
            raise InputError(
                path, f"line {no}", "a truncated or unknown 'SpecDecoding metrics' line"
            )
        rates = [float(x) for x in m["rates"].replace(" ", "").split(",") if x]
        if not rates:
            raise InputError(path, f"line {no}", "no per-position acceptance rates")
        k = len(rates)
        if out.steps is not None and out.steps != k:
            raise InputError(
                path, f"line {no}", f"{k} per-position rates where earlier lines had {out.steps}"
            )
        out.steps = k
        a, d = int(m["accepted"]), int(m["drafted"])
        if adaptive is not None:
            # a round drafted up to k tokens: its drafts are what the printed mean gives
            mean = float(m["mean"])
            n_est = a / (mean - 1) if mean > 1 else d / k
            acc, drafted = acc + a, drafted + d
            weighted, weights = weighted + mean * n_est, weights + n_est
            out.lines += 1
            continue
        if d % k:
            raise InputError(path, f"line {no}", f"Drafted: {d} tokens is not a multiple of {k}")
        n = d // k
        acc, drafted, drafts = acc + a, drafted + d, drafts + n
        # the counts per position are rounded in the line (3 decimals): pooled by drafts
        per = [r * n for r in rates]
        per_pos = per if per_pos is None else [x + y for x, y in zip(per_pos, per, strict=True)]
        out.lines += 1
    if adaptive is not None:
        # the drafts are estimates from rounded means: no round count, a rounded figure
        out.accepted, out.drafted_tokens = acc, drafted
        out.accept_length = weighted / weights if weights else None
        return out
    out.accepted, out.drafted_tokens, out.rounds = acc, drafted, drafts
    out.accept_length = 1 + acc / drafts if drafts else None
    out.accepted_per_pos = [round(x) for x in per_pos] if per_pos is not None else None
    # the pooled counts are exact (the lines print them); only the per-position ones are rounded
    out.rounded = False
    return out


def _vllm_start(path: Path, no: int, ln: str) -> EngineStart | None:
    """The build and speculative config of a start-up line (None: not the line's known form,
    which says nothing wrong about the figures)."""
    m = VLLM_START.search(ln)
    if m is None:
        return None
    config = ln[m.end() :]
    spec, device = VLLM_SPEC.search(config), VLLM_DEVICE.search(config)
    return EngineStart(
        f"{path.name}:{no}",
        m["version"].split("+")[0],
        device=device["device"] if device else None,
        method=spec["method"] if spec else None,
        draft=spec["model"] if spec else None,
        spec_tokens=int(spec["k"]) if spec else None,
    )


def _json_entries(path: Path, text: str, lines: list[str]) -> EngineLog:
    stripped = text.strip()
    entries: list[tuple[int, object]] = []
    if stripped.startswith("["):
        try:
            data = json.loads(stripped)
        except ValueError as e:
            raise InputError(path, None, f"not valid JSON: {e}") from None
        entries = [(1, x) for x in (data if isinstance(data, list) else [data])]
    else:
        try:
            whole = json.loads(stripped)
            entries = [(1, whole)]
        except ValueError:
            for no, ln in enumerate(lines, start=1):
                if not ln.strip():
                    continue
                try:
                    entries.append((no, json.loads(ln)))
                except ValueError:
                    raise InputError(path, f"line {no}", "not a JSON object (truncated?)") from None
    if len(entries) == 1 and isinstance(entries[0][1], dict):
        info = entries[0][1]
        states = info.get("internal_states")
        if isinstance(states, list):
            return _server_info(path, states)
    requests = [_request(path, no, e) for no, e in entries]
    engines = {eng for eng, _ in requests}
    if len(engines) > 1:
        named = [engine_words(e) for e in REGISTRY if e in engines]
        raise InputError(path, None, f"mixes {' and '.join(named)} requests")
    which = engines.pop() if engines else Engine.VLLM
    out = EngineLog(path, which, "requests", lines=len(requests))
    out.requests = [r for _, r in requests]
    ks = {r.spec_tokens for r in out.requests if r.spec_tokens is not None}
    if len(ks) > 1:
        raise InputError(path, "num_spec_tokens", f"requests logged with {sorted(ks)}")
    out.steps = ks.pop() if ks else None
    if not engine(which).request_rounds:
        out.drafted_tokens = sum(r.drafted_tokens or 0 for r in out.requests)
        out.note = (
            "llama-server's timings give each request's drafted and accepted tokens, not its "
            "verification rounds: no accept length (its /metrics or log lines give one)"
        )
    if all(r.rounds is not None for r in out.requests) and out.requests:
        out.rounds = sum(r.rounds or 0 for r in out.requests)
    if all(r.accepted is not None for r in out.requests) and out.requests:
        out.accepted = sum(r.accepted or 0 for r in out.requests)
    if out.rounds and out.accepted is not None:
        out.accept_length = 1 + out.accepted / out.rounds
    if any(r.per_request_figure for r in out.requests):
        if not all(r.per_request_figure for r in out.requests):
            raise InputError(path, None, "some requests count their correct drafts, some do not")
        out.figure = "spec_accept_length"
    return out


def _ints(path: Path, no: int, key: str, value: object) -> list[int] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(
        isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in value
    ):
        raise InputError(path, f"line {no}", f"{key}: expected a list of non-negative integers")
    return list(value)


def _int(path: Path, no: int, key: str, value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise InputError(path, f"line {no}", f"{key}: expected a non-negative number")
    if isinstance(value, float) and not value.is_integer():
        raise InputError(path, f"line {no}", f"{key}: {value} is not a count")
    return int(value)


def _request(path: Path, no: int, entry: object) -> tuple[Engine, RequestFigures]:
    if not isinstance(entry, dict):
        raise InputError(path, f"line {no}", "expected a JSON object per request")
    where = f"{path.name}:{no}"
    timed = llamacpp_request(path, no, entry, _ints, _int)
    if timed is not None:
        return Engine.LLAMACPP, timed
    meta = entry.get("meta_info")
    if isinstance(meta, dict) or "spec_verify_ct" in entry:
        m = meta if isinstance(meta, dict) else entry
        if "spec_verify_ct" not in m:
            raise InputError(path, f"line {no}", "meta_info without spec_verify_ct")
        r = RequestFigures(where, no)
        r.rounds = _int(path, no, "spec_verify_ct", m.get("spec_verify_ct"))
        r.completion_tokens = _int(path, no, "completion_tokens", m.get("completion_tokens"))
        r.accepted = _int(path, no, "spec_num_correct_drafts", m.get("spec_num_correct_drafts"))
        sal = m.get("spec_accept_length")
        r.spec_accept_length = float(sal) if isinstance(sal, int | float) else None
        if r.accepted is None and r.completion_tokens is not None and r.rounds is not None:
            # no count of correct drafts (older SGLang): the figure is spec_accept_length,
            # completion_tokens / spec_verify_ct, written as 1 + (completion - rounds) / rounds
            r.accepted = max(r.completion_tokens - r.rounds, 0)
            r.per_request_figure = True
        r.output_ids = _ints(path, no, "output_ids", entry.get("output_ids"))
        r.prompt_ids = _ints(path, no, "input_ids", entry.get("input_ids"))
        return Engine.SGLANG, r
    sdm = entry.get("spec_decode_metrics", entry)
    if not isinstance(sdm, dict) or "per_step_accepted" not in sdm:
        raise InputError(
            path,
            f"line {no}",
            f"neither spec_decode_metrics.per_step_accepted ({_VLLM}), meta_info.spec_verify_ct "
            f"({_SGLANG}) nor timings.draft_n ({_LLAMACPP})",
        )
    r = RequestFigures(where, no)
    r.per_step_accepted = _ints(path, no, "per_step_accepted", sdm.get("per_step_accepted"))
    assert r.per_step_accepted is not None
    r.per_step_drafted = _ints(path, no, "per_step_drafted", sdm.get("per_step_drafted"))
    r.spec_tokens = _int(path, no, "num_spec_tokens", sdm.get("num_spec_tokens"))
    if r.per_step_drafted is not None:
        if len(r.per_step_drafted) != len(r.per_step_accepted):
            raise InputError(
                path,
                f"line {no}",
                f"per_step_drafted has {len(r.per_step_drafted)} rounds, per_step_accepted "
                f"{len(r.per_step_accepted)}",
            )
        pairs = zip(r.per_step_accepted, r.per_step_drafted, strict=True)
        over = [k for k, (a, d) in enumerate(pairs) if a > d]
        if over:
            raise InputError(
                path, f"line {no}", f"round {over[0]} accepted more tokens than it drafted"
            )
    counted = r.counted_accepted or []
    r.rounds = len(counted)
    r.accepted = sum(counted)
    r.prompt_ids = _ints(path, no, "prompt_token_ids", entry.get("prompt_token_ids"))
    r.output_ids = _ints(path, no, "output_token_ids", entry.get("output_token_ids"))
    return Engine.VLLM, r


def _server_info(path: Path, states: list) -> EngineLog:
    values = [
        s["avg_spec_accept_length"]
        for s in states
        if isinstance(s, dict) and isinstance(s.get("avg_spec_accept_length"), int | float)
    ]
    if not values:
        raise InputError(
            path, "internal_states", "no avg_spec_accept_length (no 40-batch window finished yet?)"
        )
    # one figure per data-parallel rank, each pooled over its own windows
    return EngineLog(
        path,
        Engine.SGLANG,
        "server-info",
        accept_length=sum(values) / len(values),
        lines=len(values),
        rounded=len(values) > 1,
    )
