"""Where an engine accepted less than this draft does on the same requests: its first shortfall
(request, round, position) and the engine-side fault classes that fit where the shortfalls fall.
`reconcile` (`pipeline.py`) words its engine-side verdict over these."""

from __future__ import annotations

from inspector.doctor.reconcile.replay_counts import counted, request_rounds
from inspector.doctor.reconcile.result import Gap
from inspector.formats.engine_log import RequestFigures
from inspector.serving.replay import SampleReplay

# Engine-side fault classes that make an engine accept less than the draft does on the same
# requests, as public reports of collapsed acceptance named them.
ENGINE_FAULTS = (
    (
        "late",
        "the engine ignores the draft's sliding window or attention config, or feeds dummy "
        "tokens past max_model_len (the gap grows with the context position)",
    ),
    (
        "early",
        "the draft's KV cache is read back wrong (prefix cache, attention metadata, a port's "
        "indexing): the engine accepts less from the first rounds on",
    ),
    (
        "batch",
        "batching or CUDA-graph state shared between requests: compare the requests run alone "
        "with a batch",
    ),
)


def first_gap(
    pairs: dict[int, RequestFigures], per_sample: dict[int, SampleReplay]
) -> tuple[Gap | None, list[int]]:
    """The first round (in the engine's request order) where it accepted less than the
    replay, and the start of every such round."""
    first: Gap | None = None
    short: list[int] = []
    order = sorted(pairs.items(), key=lambda kv: kv[1].line)  # the log's own order
    for i, req in order:
        rep = per_sample.get(i)
        logged = req.counted_accepted
        if rep is None or logged is None:
            continue
        ours = request_rounds(rep)
        starts = [int(rep.starts[k]) for k in counted(rep)]
        for k, (e, a) in enumerate(zip(logged, ours, strict=False)):
            if e < a:
                short.append(starts[k])
                if first is None:
                    first = Gap(req.where, i, k, e, a, starts[k])
    return first, short


def fault_classes(short: list[int], first: Gap | None) -> list[str]:
    """The engine-side classes that fit where the engine fell short (`short`: the starts of
    the rounds it fell short in)."""
    by = dict(ENGINE_FAULTS)
    if not short:
        return [by["early"], by["late"], by["batch"]]
    positions = sorted(short)
    mid = positions[len(positions) // 2]
    out = []
    if first is not None and first.round == 0:
        out.append(by["early"])
    if mid >= 1024 or (first is not None and first.position >= 1024):
        out.append(by["late"])
    out.append(by["batch"])
    if by["early"] not in out:
        out.append(by["early"])
    if by["late"] not in out:
        out.append(by["late"])
    return out
