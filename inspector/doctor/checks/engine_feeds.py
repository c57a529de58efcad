"""Check: what each engine release will feed this draft, beside the wiring it was trained on.

The config is read the way each engine reads it (`engine_reading`: where it looks for the ids,
its default when it finds none, its index convention, its norm-flag defaults), the layers it
feeds are matched to the samples' slots, and each fed wiring is scored like the others (its
step-0 all-tok accuracy from the wiring search, the accept length an engine logs from the
replay). An engine that feeds another wiring than the trained one, or cannot serve the draft, is
an error; norm flags the engines run differently are a warning; an engine that does not load
the config's layout at all (it errors on load) is named, as information.

Evidence: one row per reader (engine, version, path): where it found the ids, the ids, the HF
indices it feeds, the wiring, its counts and accept length, its problem, its norm flags.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from inspector.doctor.finding import Finding, Kind, Severity
from inspector.doctor.stats import clearly_better
from inspector.doctor.wiring.engine_reading import NEVER, EngineRead
from inspector.doctor.wiring.named import NamedWirings
from inspector.doctor.wiring.search import WiringSearch
from inspector.engines import engine_id
from inspector.metrics import Counts
from inspector.sample import SlotInfo
from inspector.wiring import Wiring


@dataclass(frozen=True)
class FeedRow:
    read: EngineRead
    wiring: tuple[int, ...] | None
    label: str | None
    all_tok: Counts | None
    accept_length: float | None
    trained: bool  # feeds the recommended (trained) wiring
    worse: bool  # feeds a wiring clearly worse than the trained one

    def to_dict(self) -> dict:
        d = self.read.to_dict()
        d.update(
            wiring=list(self.wiring) if self.wiring is not None else None,
            wiring_label=self.label,
            all_tok=self.all_tok.to_dict() if self.all_tok is not None else None,
            accept_length=self.accept_length,
            feeds_trained_wiring=self.trained,
        )
        return d

    def line(self) -> str:
        r = self.read
        if r.unsupported:
            return f"{r.reader.label}: {r.unsupported}"
        found = f"reads {r.where} {list(r.ids or [])}" if r.where else "finds no ids: its default"
        if r.hf is None and r.readings:
            fed = " or ".join(f"HF {list(h)}" for h in r.readings)
            return f"{r.reader.label}: {found} -> {fed} (by the target's model file)"
        head = f"{r.reader.label}: {found} -> HF {list(r.hf or [])}"
        if r.problem:
            return f"{head}: {r.problem}"
        if self.wiring is None:
            return f"{head}: the samples hold no slot of some of these layers"
        acc = "-" if self.all_tok is None or self.all_tok.acc is None else f"{self.all_tok.acc:.1%}"
        al = "" if self.accept_length is None else f", accept len {self.accept_length:.2f}"
        tag = " (the trained wiring)" if self.trained else ""
        return f"{head} = {self.label}{tag}: {acc} step-0{al}"


@dataclass(frozen=True)
class EngineFeeds:
    rows: list[FeedRow]
    norm_disagreements: list[str]
    # the places the config writes ids in, where they disagree (each engine reads its own)
    id_places: list[tuple[str, tuple[int, ...], tuple[int, ...]]] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "engines": [r.to_dict() for r in self.rows],
            "norm_disagreements": self.norm_disagreements,
            "disagreeing_id_places": [
                {"key": k, "ids": list(v), "hf_indices": list(h)} for k, v, h in self.id_places
            ],
        }

    def lines(self) -> list[str]:
        """One line per engine reading, then the norm flags they run differently and the
        places whose ids disagree."""
        places = []
        if self.id_places:
            written = ", ".join(f"{k} {list(v)} (HF {list(h)})" for k, v, h in self.id_places)
            places = [
                f"the config writes ids that disagree: {written}; each engine reads its own place"
            ]
        return [r.line() for r in self.rows] + self.norm_disagreements + places


def engine_feeds_finding(
    names: NamedWirings,
    ws: WiringSearch,
    rec: tuple[int, ...],
    infos: Sequence[SlotInfo],
    accept: Mapping[tuple[int, ...], float],
    *,
    engines: Sequence[str] | None = None,
    places: Sequence[tuple[str, tuple[int, ...], tuple[int, ...]]] = (),
) -> Finding | None:
    """The finding (None: no engine reading, e.g. the target's layer count is unknown).
    engines: keep only these engines' rows (any spelling the registry reads; None: all)."""
    wanted = None if engines is None else {engine_id(e) for e in engines}
    reads = [(r, w) for r, w in names.engine_reads if wanted is None or r.reader.engine in wanted]
    if not reads:
        return None
    best = ws.hits(rec)
    rows = []
    for r, w in reads:
        sc = ws.scores(w) if w is not None else None
        worse = w is not None and w != rec and sc is not None and clearly_better(best, ws.hits(w))
        rows.append(
            FeedRow(
                r,
                w,
                Wiring(w).label(infos) if w is not None else None,
                sc.counts() if sc is not None else None,
                accept.get(w) if w is not None else None,
                w == rec,
                worse,
            )
        )
    disagree = _norm_disagreements([r for r, _ in reads])
    split = list(places) if len({h for _, _, h in places}) > 1 else []
    bad = [x for x in rows if x.worse or x.read.problem]
    unread = [x for x in rows if x.read.unsupported]
    if bad:
        severity = Severity.ERROR
        names_bad = ", ".join(x.read.reader.label for x in bad)
        summary = (
            f"{names_bad} will not feed this draft the wiring its weights were trained on "
            f"({Wiring(rec).label(infos)}), each reading its config as it does"
        )
        fix = (
            "write the trained wiring's ids where each engine reads them (the serving_config "
            "finding gives them per engine) and check each engine's row again"
        )
    elif disagree or split:
        severity = Severity.WARNING
        summary = (
            "every engine feeds the trained wiring, but they run the norm flags differently"
            if disagree
            else "every engine feeds the trained wiring, but the config writes ids that disagree"
        )
        fix = (
            "write each flag and the ids explicitly and alike in every place engines read them "
            "(a reader's default, or another place, then cannot differ)"
        )
    elif unread:
        # a layout the engine refuses is loud (it errors on load), not a silent mismatch
        severity = Severity.INFO
        summary = (
            f"{', '.join(x.read.reader.label for x in unread)} cannot load this config's layout; "
            f"the others feed the trained wiring {Wiring(rec).label(infos)}"
        )
        fix = "convert the draft for that engine, then run the doctor on the converted folder"
    else:
        severity = Severity.INFO
        summary = f"every engine reading shown feeds the trained wiring {Wiring(rec).label(infos)}"
        fix = None
    return Finding(
        Kind.ENGINE_FEEDS,
        severity,
        summary,
        fix,
        EngineFeeds(rows, disagree, split),
        wiring=rec if bad else None,
    )


def _norm_disagreements(reads: Sequence[EngineRead]) -> list[str]:
    """Flags the engines run with different values (each reader's value and how it got it)."""
    values: dict[str, dict[bool, list[str]]] = {}
    for r in reads:
        for flag, v, how in r.norms:
            values.setdefault(flag, {}).setdefault(v, []).append(
                r.reader.label + (f" ({how})" if how.startswith("absent") or how == NEVER else "")
            )
    out = []
    for flag, by in values.items():
        if len(by) > 1:
            parts = "; ".join(
                f"{str(v).lower()}: {', '.join(dict.fromkeys(w))}" for v, w in by.items()
            )
            out.append(f"{flag} differs between engines ({parts})")
    return out
