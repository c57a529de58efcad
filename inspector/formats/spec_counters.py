"""The speculative-decoding counters in Prometheus text, as vLLM and llama.cpp both write them
(llama.cpp's `/metrics` took vLLM's schema, llama.cpp PR #26389): `<prefix>:spec_decode_num_drafts`,
`..._num_draft_tokens`, `..._num_accepted_tokens` (`_total` as prometheus_client writes counters)
and `..._num_accepted_tokens_per_pos{position="i"}`, summed over label sets (engines, models)."""

from __future__ import annotations

import re
from pathlib import Path

from inspector.engines import Engine, all_engines
from inspector.engines import engine as serving_engine
from inspector.errors import InputError
from inspector.formats.engine_figures import EngineLog


def counter_line(prefix: str) -> re.Pattern[str]:
    """One counter line of the spec-decode family under metric `prefix`."""
    return re.compile(
        rf"^(?P<name>{prefix}:spec_decode_num_(?:drafts|draft_tokens|accepted_tokens|"
        r"accepted_tokens_per_pos))(?:_total)?(?P<labels>\{[^}]*\})?\s+(?P<value>\S+)"
    )


# every engine that writes the family, under its own prefix (its module's `counter_prefix`)
COUNTERS: dict[Engine, re.Pattern[str]] = {
    s.id: counter_line(s.counter_prefix) for s in all_engines() if s.counter_prefix
}


def spec_counters(path: Path, lines: list[str], engine: str) -> EngineLog:
    """The pooled figures `engine`'s counters hold; a counter that is not a number, a per-position
    one without its position, or a missing drafts / accepted counter is refused, naming it."""
    prefix = f"{serving_engine(engine).counter_prefix}:spec_decode_num_"
    pattern = COUNTERS[serving_engine(engine).id]
    out = EngineLog(path, engine, "prometheus")
    sums: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    for no, ln in enumerate(lines, start=1):
        m = pattern.match(ln)
        if m is None:
            continue
        try:
            value = float(m["value"])
        except ValueError:
            raise InputError(path, f"line {no}", f"{m['name']}: value {m['value']!r}") from None
        name = m["name"].removeprefix(prefix)
        if name == "accepted_tokens_per_pos":
            pos = re.search(r'position="(\d+)"', m["labels"] or "")
            if pos is None:
                raise InputError(path, f"line {no}", "accepted_tokens_per_pos without position")
            per_pos[int(pos[1])] = per_pos.get(int(pos[1]), 0.0) + value
        else:
            sums[name] = sums.get(name, 0.0) + value
        out.lines += 1
    for key in ("drafts", "accepted_tokens"):
        if key not in sums:
            raise InputError(path, f"{prefix}{key}", "counter missing")
    out.rounds, out.accepted = int(sums["drafts"]), int(sums["accepted_tokens"])
    out.drafted_tokens = int(sums["draft_tokens"]) if "draft_tokens" in sums else None
    if per_pos:
        out.accepted_per_pos = [int(per_pos.get(i, 0)) for i in range(max(per_pos) + 1)]
        out.steps = len(out.accepted_per_pos)
    out.accept_length = 1 + out.accepted / out.rounds if out.rounds else None
    return out
