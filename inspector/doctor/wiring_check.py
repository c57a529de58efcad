"""Check: the wiring the draft was trained for, against the one its config selects on an engine.

Engines capture the configured layers and concatenate them in ascending layer order, so the
wiring a served draft gets is fixed by its config's aux layer ids; a draft trained on another
wiring (or on a non-ascending order no engine can feed) loses accuracy in serving only.

Evidence: the recommended wiring and the next best with their all-tok counts; the named wirings
(configured, train, serve) with their margins and paired z; how each source's layer ids were read
(see `layer_ids`); the search's size. Fix: the engine ids for the recommended wiring, or
`--write-fixed` for an order no engine can feed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from inspector.doctor import serving, wording
from inspector.doctor.engine_default import EngineFeed, engine_defaults
from inspector.doctor.layer_ids import LayerIdFacts, layer_id_facts, other_readings
from inspector.doctor.report import Finding, WiringCase, WiringResult
from inspector.doctor.search import WiringSearch
from inspector.doctor.slot_identity import SlotIdentity
from inspector.doctor.stats import clearly_better, paired_hits_z
from inspector.errors import InputError
from inspector.evaluate import Evaluator
from inspector.metrics import Counts
from inspector.sample import SlotInfo
from inspector.wiring import Wiring, serve_wiring, train_wiring

ENGINE_DEFAULT = "engine default"  # the named wiring engines feed a config without ids


@dataclass(frozen=True)
class WiringRef:
    """A wiring quoted in the evidence; margin: accuracy points the recommended wiring leads by."""

    wiring: tuple[int, ...]
    label: str
    all_tok: Counts
    margin: float | None = None
    z: float | None = None
    # Tokens per round an engine logs serving this wiring (a greedy chain of ACCEPT_STEPS drafts,
    # replayed over the doctor's samples); None where not replayed.
    accept_length: float | None = None
    # the accept length is a lower bound: the samples hold no continuation past their stops
    accept_bound: bool = False

    def to_dict(self) -> dict:
        out: dict = {"wiring": list(self.wiring), "label": self.label}
        out["all_tok"] = self.all_tok.to_dict()
        if self.margin is not None:
            out["margin"] = self.margin
        if self.z is not None:
            out["z"] = self.z
        if self.accept_length is not None:
            out["accept_length"] = self.accept_length
            if self.accept_bound:
                out["accept_length_is_lower_bound"] = True
        return out


@dataclass
class WiringFacts:
    case: WiringCase
    best: WiringRef
    second: WiringRef | None
    top_ranked: WiringRef | None  # when the top-ranked order is not the recommended one
    best_ascending: WiringRef | None  # when the recommended order is not ascending
    named: dict[str, WiringRef]
    layer_ids: LayerIdFacts
    engine_ids: tuple[list[int], list[int]] | None  # (vLLM, SGLang before #25454) for `best`
    pairing_shift: int
    searched: int
    dropped_early: int
    assumes_config_fixes: bool = False
    # What engines feed when the config names no ids (see `engine_default`); num_layers: the
    # target's layer count when known.
    engine_defaults: list[EngineFeed] = field(default_factory=list)
    num_layers: int | None = None
    default_clearly_worse: bool = False  # the engine-default wiring scores clearly worse
    accept_samples: tuple[int, ...] = ()  # the samples the accept lengths were replayed on

    def to_dict(self) -> dict:
        out: dict = {
            "case": self.case.value,
            "best": self.best.to_dict(),
            "second": self.second.to_dict() if self.second is not None else None,
            "named": {k: v.to_dict() for k, v in self.named.items()},
            "layer_ids": self.layer_ids.to_dict(),
            "pairing_shift": self.pairing_shift,
            "searched": self.searched,
            "dropped_early": self.dropped_early,
        }
        for key in ("top_ranked", "best_ascending"):
            ref = getattr(self, key)
            if ref is not None:
                out[key] = ref.to_dict()
        if self.assumes_config_fixes:
            out["assumes_config_fixes"] = True
        if self.accept_samples:
            out["accept_samples"] = list(self.accept_samples)
        if self.case == WiringCase.UNCONFIGURED:
            out["engine_defaults"] = [f.to_dict() for f in self.engine_defaults]
            out["num_layers"] = self.num_layers
        return out


@dataclass
class NamedWirings:
    """The wirings the report quotes by name, and how the config's ids were read."""

    named: dict[str, tuple[int, ...]]
    layer_ids: LayerIdFacts
    engine_defaults: list[EngineFeed] = field(default_factory=list)
    num_layers: int | None = None

    @property
    def configured(self) -> tuple[int, ...] | None:
        return self.named.get("configured")

    @property
    def protected(self) -> list[tuple[int, ...]]:
        return list(dict.fromkeys(self.named.values()))


def named_wirings(
    ev: Evaluator,
    infos: Sequence[SlotInfo],
    *,
    override: Sequence[int] | None = None,
    identity: SlotIdentity | None = None,
) -> NamedWirings:
    """configured (what the draft's aux ids select on an engine), train and serve; `infos` carry
    the slots' identity as decided (`slot_identity`)."""
    data_config = ev.samples.data_config
    ids = layer_id_facts(
        ev.draft.config,
        infos,
        ev.n_blocks,
        override=override if override is not None else ev.slot_layers,
        data_config=Path(data_config) if data_config is not None else None,
        identity=identity,
    )
    named: dict[str, tuple[int, ...]] = {}
    if ids.configured is not None:
        named["configured"] = ids.configured
    for name, fn in (("train", train_wiring), ("serve", serve_wiring)):
        try:
            named[name] = fn(infos, ev.n_blocks).slots
        except InputError:
            pass
    n_layers = identity.num_layers if identity is not None else None
    feeds = engine_defaults(infos, ev.n_blocks, n_layers)
    for feed in feeds:  # scored beside the others whenever the samples hold its layers
        if feed.wiring is not None:
            named.setdefault(ENGINE_DEFAULT, feed.wiring)
    return NamedWirings(named, ids, feeds, n_layers)


def wiring_results(
    ws: WiringSearch, infos: Sequence[SlotInfo], named: dict[str, tuple[int, ...]]
) -> list[WiringResult]:
    return [
        WiringResult(
            wiring=acc.wiring,
            label=Wiring(acc.wiring).label(infos),
            all_tok=acc.counts(),
            samples=len(acc.hits),
            complete=not acc.dropped,
            mean_logp=acc.mean_logp(),
            roles=[n for n, w in named.items() if w == acc.wiring],
        )
        for acc in ws.ranked()
    ]


def is_ascending(w: Sequence[int], infos: Sequence[SlotInfo]) -> bool:
    """Whether an engine's ascending capture order can feed w (by HF index, else slot index)."""
    hf = serving.hf_indices(w, infos)
    keys = hf if all(k is not None for k in hf) else list(w)
    return all(a < b for a, b in zip(keys, keys[1:], strict=False))


def recommend(
    ws: WiringSearch, results: list[WiringResult], infos: Sequence[SlotInfo]
) -> tuple[int, ...]:
    """The wiring to serve: the top-ranked one, unless it is not ascending and not clearly better
    than the best ascending one (which then needs no permuted checkpoint)."""
    top = results[0]
    if is_ascending(top.wiring, infos):
        return top.wiring
    asc = next((r for r in results if r.complete and is_ascending(r.wiring, infos)), None)
    if asc is None or clearly_better(ws.hits(top.wiring), ws.hits(asc.wiring)):
        return top.wiring
    return asc.wiring


def _margin(a: WiringResult, b: WiringResult) -> float:
    return round((a.all_tok.acc or 0.0) - (b.all_tok.acc or 0.0), 4)


def _ref(
    r: WiringResult,
    best: WiringResult | None = None,
    z: float | None = None,
    accept: dict[tuple[int, ...], float] | None = None,
    bounded: frozenset[tuple[int, ...]] = frozenset(),
) -> WiringRef:
    margin = _margin(best, r) if best is not None else None
    al = (accept or {}).get(r.wiring)
    return WiringRef(r.wiring, r.label, r.all_tok, margin, z, al, r.wiring in bounded)


def _case(
    ws: WiringSearch, best: WiringResult, names: NamedWirings, serving_cfg: dict
) -> WiringCase:
    if serving_cfg.get("ascending") is False:
        return WiringCase.NOT_ASCENDING
    conf = names.configured
    if conf is None:
        return WiringCase.CONFIG_UNMATCHED if names.layer_ids.draft else WiringCase.UNCONFIGURED
    if conf == best.wiring:
        return WiringCase.CONFIGURED
    if clearly_better(ws.hits(best.wiring), ws.hits(conf)):
        return WiringCase.CONFIG_WRONG
    return WiringCase.CONFIG_CLOSE


def _severity(facts: WiringFacts) -> str:
    case = facts.case
    if case in (WiringCase.NOT_ASCENDING, WiringCase.CONFIG_WRONG):
        return "error"
    if case == WiringCase.CONFIG_UNMATCHED:
        return "warning"
    if case == WiringCase.UNCONFIGURED:
        # Engines feed their default layers: an error when that wiring scores clearly worse,
        # or when no engine can serve the draft without ids; info only when it is the best one.
        default = facts.named.get(ENGINE_DEFAULT)
        if default is not None:
            if default.wiring == facts.best.wiring:
                return "info"
            return "error" if facts.default_clearly_worse else "warning"
        if any(not f.serves for f in facts.engine_defaults):
            return "error"
        serve = facts.named.get("serve")
        if not facts.engine_defaults and (serve is None or serve.wiring == facts.best.wiring):
            return "info"
        return "warning"
    return "info"


def _engine_ids(serving_cfg: dict) -> tuple[list[int], list[int]] | None:
    vllm = serving_cfg.get("vllm", {}).get("config", {}).get("eagle_aux_hidden_state_layer_ids")
    sglang = serving_cfg.get("sglang", {}).get("layer_ids_before_pr25454")
    return (vllm, sglang) if vllm is not None else None


def wiring_finding(
    ws: WiringSearch,
    results: list[WiringResult],
    names: NamedWirings,
    infos: Sequence[SlotInfo],
    serving_cfg: dict,
    *,
    shift: int,
    recommended: tuple[int, ...],
    assumes_config_fixes: bool = False,
    accept: dict[tuple[int, ...], float] | None = None,
    accept_samples: tuple[int, ...] = (),
    accept_bounded: frozenset[tuple[int, ...]] = frozenset(),
) -> Finding:
    """The wiring finding for the recommended wiring (see `WiringCase` for the cases); accept:
    the replayed accept length of some wirings (the recommended and the served ones)."""
    top = results[0]
    best = next(r for r in results if r.wiring == recommended)
    others = [r for r in results if r is not best]
    by_wiring = {r.wiring: r for r in results}
    bh = ws.hits(best.wiring)
    named: dict[str, WiringRef] = {}
    for name, w in names.named.items():
        if w in by_wiring:
            h = ws.hits(w)
            z = round(paired_hits_z(bh, h), 2) if h.size == bh.size else None
            named[name] = _ref(by_wiring[w], best, z, accept, accept_bounded)
    case = _case(ws, best, names, serving_cfg)
    asc = None
    if case == WiringCase.NOT_ASCENDING:
        asc = next((r for r in others if is_ascending(r.wiring, infos)), None)
    names.layer_ids.readings = other_readings(names.layer_ids, infos, best.wiring)
    facts = WiringFacts(
        case=case,
        best=_ref(best, accept=accept, bounded=accept_bounded),
        second=_ref(others[0], best) if others else None,
        top_ranked=_ref(top) if top is not best else None,
        best_ascending=_ref(asc, best) if asc is not None else None,
        named=named,
        layer_ids=names.layer_ids,
        engine_ids=_engine_ids(serving_cfg),
        pairing_shift=shift,
        searched=len(results),
        dropped_early=sum(1 for r in results if not r.complete),
        assumes_config_fixes=assumes_config_fixes,
        engine_defaults=names.engine_defaults,
        num_layers=names.num_layers,
        accept_samples=accept_samples if accept else (),
        default_clearly_worse=ENGINE_DEFAULT in names.named
        and bool(clearly_better(bh, ws.hits(names.named[ENGINE_DEFAULT]))),
    )
    text = wording.wiring(facts)
    return Finding("wiring", _severity(facts), text.summary, text.fix, facts, wiring=best.wiring)
