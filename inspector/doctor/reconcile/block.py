"""What an engine logged of a block draft (DFlash, DFlash2), explained: its figures against our
block replay (`evaluate.block_eval`) of the same requests under each wiring the block plan shows
(`doctor.wiring.block_feeds.plan_block_wirings`: the configured ids, the searched wiring where the
weights fit another, and each reader's feed).

Requests are paired with samples as EAGLE-3's reconcile pairs them (`pipeline.pair_requests`). A
paired request equals a wiring's replay where its rounds' accepted counts are the replay's, round
for round (vLLM's `per_step_accepted`), else where its rounds and accepted drafts are; without
pairs, the pooled figure is held against each replay's pooled counts (`matching.figure_equals`).
Then one of:

- it equals the configured wiring's replay: the draft is served as configured (`as_is`);
- it equals another wiring's replay: the engine fed those layers, not the configured ones
  (`wrong_wiring`), named with the readers that feed them and the fix;
- it equals none: below every replay an engine-side fault (`engine_fault`), else other requests
  (`other_data`); the first request and round where the engine departs from the configured
  replay is named (`Gap`), and so are the engine's known faults in computing block drafts (vLLM
  0.32's CPU build norms every layer's context keys with layer 0's k_norm: measured in CI, it
  accepts 128 drafts in 890 rounds of the demo's block draft where the draft as trained accepts
  135 in 883)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from inspector.doctor.reconcile import words
from inspector.doctor.reconcile.matching import figure_equals
from inspector.doctor.reconcile.result import Gap, Reconciliation, Verdict, WiringCheck
from inspector.doctor.wiring.block_feeds import AcceptRow
from inspector.engines import Engine, engine
from inspector.formats.engine_log import EngineLog, RequestFigures
from inspector.metrics.rounds import AcceptStats


@dataclass(frozen=True)
class BlockReplay:
    """One wiring's block replay: its plan row (name, HF layers, the readers feeding it) and
    each sample's rounds as the log's engine counts them (sample index -> accepted per round)."""

    row: AcceptRow
    label: str
    slots: tuple[int, ...]
    depth: int  # the drafts a round runs
    rounds: dict[int, list[int]]
    starts: dict[int, list[int]] | None = None  # sample -> each round's start (None: unknown)


def replays_of(report, rows: Sequence[AcceptRow], which: Engine) -> list[BlockReplay]:
    """The `BlockReport`'s wirings (in `rows`' order) as `BlockReplay`s, counted as `which`
    counts them (`per_sample[]["accepted_<engine>"]`)."""
    key = f"accepted_{which.value}"
    out = []
    for row, w in zip(rows, report.wirings, strict=True):
        rounds = {int(s["sample"]): list(s[key]) for s in w.per_sample}
        depth = w.drafts or w.block_size - 1
        out.append(BlockReplay(row, w.label, tuple(w.slots), depth, rounds))
    return out


def _same(req: RequestFigures, ours: list[int]) -> bool:
    if req.counted_accepted is not None:
        return list(req.counted_accepted) == ours
    if req.rounds is not None and req.accepted is not None and not req.per_request_figure:
        return (req.rounds, req.accepted) == (len(ours), sum(ours))
    return False


def _stats(r: BlockReplay, pairs: dict[int, RequestFigures]) -> AcceptStats:
    st = AcceptStats(r.depth)
    for i, acc in r.rounds.items():
        if pairs and i not in pairs:
            continue
        st.rounds += len(acc)
        st.accepted += sum(acc)
    return st


def block_checks(
    log: EngineLog, replays: Sequence[BlockReplay], pairs: dict[int, RequestFigures]
) -> list[WiringCheck]:
    """Each wiring's replay pooled over the paired requests (all samples without pairs), whether
    the log's figure equals it, and how many paired requests equal it round for round."""
    out = []
    for r in replays:
        stats = _stats(r, pairs)
        eq = None
        if pairs:
            eq = sum(1 for i, req in pairs.items() if i in r.rounds and _same(req, r.rounds[i]))
        out.append(WiringCheck(_label(r), r.slots, stats, figure_equals(log, stats), eq))
    return out


def _label(r: BlockReplay) -> str:
    return f"{r.row.name} HF {list(r.row.layers)}"


def _ids(layers: Sequence[int]) -> list[int]:
    return [k - 1 for k in layers]


def first_departure(
    replay: BlockReplay, pairs: dict[int, RequestFigures]
) -> tuple[Gap | None, words.Departure | words.OtherLength | None]:
    """The first paired request (in sample order) and round where the engine's count departs
    from `replay`'s, and its words (None: no request gives its rounds, or none departs)."""
    for i in sorted(pairs):
        req, ours = pairs[i], replay.rounds.get(i)
        theirs = req.counted_accepted
        if ours is None or theirs is None:
            continue
        for k, (a, b) in enumerate(zip(theirs, ours, strict=False)):
            if a != b:
                gap = Gap(req.where, i, k, a, b, -1)
                return gap, words.Departure(gap)
        if len(theirs) != len(ours):
            return None, words.OtherLength(req.where, i, len(theirs), len(ours))
    return None, None


def reconcile_block(
    log: EngineLog,
    replays: Sequence[BlockReplay],
    pairs: dict[int, RequestFigures],
    notes: list[str],
    trained: tuple[int, ...] | None = None,
) -> Reconciliation:
    """The verdict on a block draft's log: `replays[0]` is the configured wiring's; `trained`:
    the layers the weights fit (the doctor's search; None: the configured ones)."""
    checks = block_checks(log, replays, pairs)
    full = [c for c in checks if pairs and c.requests_equal == len(pairs)]
    matches = full or [c for c in checks if c.equal]
    conf, conf_check = replays[0], checks[0]
    trained = tuple(trained or conf.row.layers)
    n = len(pairs)
    per_request = None
    if full and n:
        per_request = words.RoundForRound(matches[0].requests_equal or 0, n)
    figure = words.logged_text(log)
    base = dict(
        log=log,
        checks=checks,
        requests_matched=n,
        notes=notes,
        configured=conf_check.label,
    )
    if trained != tuple(conf.row.layers):
        notes.append(
            f"the weights fit HF {list(trained)}, not the configured HF {list(conf.row.layers)} "
            "(the doctor's wiring search): `eagle-inspect doctor` names the fix"
        )
    if any(c is conf_check for c in matches):
        return Reconciliation(
            verdict=Verdict.AS_IS,
            said=words.BlockAsConfigured(figure, tuple(conf.row.layers), per_request),
            matched=conf_check.label,
            best=conf_check.label,
            **base,
        )
    if matches:
        m = matches[0]
        r = replays[checks.index(m)]
        fix = (
            f"feed the trained layers HF {list(trained)}: set dflash_config.target_layer_ids to "
            f"{_ids(trained)}"
            + (
                f" (dflash_config names them already; what the engine read before them fed "
                f"HF {list(r.row.layers)}: correct or drop that key, named in the load notes)"
                if trained == tuple(conf.row.layers)
                else ""
            )
        )
        return Reconciliation(
            verdict=Verdict.WRONG_WIRING,
            said=words.BlockOtherLayers(
                figure,
                r.row.name,
                tuple(r.row.layers),
                tuple(r.row.fed_by),
                tuple(conf.row.layers),
                per_request,
            ),
            fix=fix,
            matched=m.label,
            best=conf_check.label,
            **base,
        )
    gap, where = first_departure(conf, pairs)
    al = log.accept_length
    replayed = [c.stats.accept_length for c in checks if c.stats.accept_length is not None]
    below = al is not None and replayed and al < min(replayed)
    verdict = Verdict.ENGINE_FAULT if below else Verdict.OTHER_DATA
    serving = engine(log.engine)
    known = serving.facts_for(None, drafts="dflash", topic="numerics")
    notes.extend(f"known: {f.words} ({f.since})" for f in known)
    said = words.BlockNoneEqual(figure, bool(below), where, len(known), serving.display)
    return Reconciliation(verdict=verdict, said=said, gap=gap, best=conf_check.label, **base)
