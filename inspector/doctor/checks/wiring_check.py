"""Check: the wiring the draft was trained for, against the one its config selects on an engine.

Engines capture the configured layers and concatenate them in ascending layer order, so the
wiring a served draft gets is fixed by its config's aux layer ids; a draft trained on another
wiring (or on a non-ascending order no engine can feed) loses accuracy in serving only.

Evidence: the recommended wiring and the next best with their all-tok counts; the named wirings
(configured, train, serve) with their margins and paired z; how each source's layer ids were read
(see `layer_ids`); the search's size. Ids that repeat a layer or name one below 0 select no
wiring: the finding is then an error that says what each engine release feeds
(`malformed_ids`), never that the draft fits its configured wiring. Fix: the engine ids for the
recommended wiring, or `--write-fixed` for an order no engine can feed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

from inspector.doctor.budget import ACCEPT_STEPS
from inspector.doctor.checks.engine_default import EngineFeed
from inspector.doctor.checks.layer_ids import (
    CONVENTIONS,
    LayerIdFacts,
    other_readings,
    reading_text,
    reread_fix_text,
    slots_source_text,
)
from inspector.doctor.checks.malformed_ids import MalformedIds, feeds_text
from inspector.doctor.finding import Finding, Kind, Severity
from inspector.doctor.phrasing import WRITE_FIXED, Text
from inspector.doctor.report import WiringResult
from inspector.doctor.serving import ServingConfig
from inspector.doctor.stats import clearly_better, paired_hits_z
from inspector.doctor.wiring.named import ENGINE_DEFAULT, NamedWirings, is_ascending
from inspector.doctor.wiring.search import WiringSearch
from inspector.engines import Engine
from inspector.engines.capture import LLAMA_CPP as GGUF_IDS
from inspector.metrics import Counts
from inspector.sample import SlotInfo

# the engines' names from the registry (a rename is one edit in inspector/engines/)
_SGLANG, _VLLM = (
    Engine.SGLANG.display,
    Engine.VLLM.display,
)


class WiringCase(Enum):
    NOT_ASCENDING = "not_ascending"  # the recommended order is one no engine can feed
    CONFIG_WRONG = "config_wrong"  # the config selects a clearly worse wiring
    CONFIG_CLOSE = "config_close"  # the config selects another wiring, not clearly worse
    CONFIG_UNMATCHED = "config_unmatched"  # the config's ids match no slot as read
    CONFIG_MALFORMED = "config_malformed"  # the config's ids repeat a layer or name one below 0
    UNCONFIGURED = "unconfigured"  # the config names no aux layer ids
    CONFIGURED = "configured"  # the config selects the recommended wiring


@dataclass(frozen=True)
class WiringRef:
    """A wiring quoted in the evidence; margin: accuracy points the recommended wiring leads by."""

    wiring: tuple[int, ...]
    label: str
    all_tok: Counts
    margin: float | None = None
    z: float | None = None
    # Tokens per round an engine logs serving this wiring (a chain of ACCEPT_STEPS drafts over
    # the doctor's samples: replayed greedy, or expected at a temperature); None where not run.
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
    # (vLLM ids, SGLang's ids in words: by the target's class) for `best`
    engine_ids: tuple[list[int], str] | None
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
    # what the accept lengths are: 'greedy' (replayed), or the sampling they are expected at
    accept_settings: str = "greedy"
    malformed: MalformedIds | None = None  # the config's ids, when they name no wiring

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
            out["accept_settings"] = self.accept_settings
        if self.malformed is not None:
            out["malformed_ids"] = self.malformed.to_dict()
        if self.case == WiringCase.UNCONFIGURED:
            out["engine_defaults"] = [f.to_dict() for f in self.engine_defaults]
            out["num_layers"] = self.num_layers
        return out


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
    ws: WiringSearch, best: WiringResult, names: NamedWirings, serving_cfg: ServingConfig
) -> WiringCase:
    if serving_cfg.ascending is False:
        return WiringCase.NOT_ASCENDING
    if names.malformed is not None:
        return WiringCase.CONFIG_MALFORMED
    conf = names.configured
    if conf is None:
        return WiringCase.CONFIG_UNMATCHED if names.layer_ids.draft else WiringCase.UNCONFIGURED
    if conf == best.wiring:
        return WiringCase.CONFIGURED
    if clearly_better(ws.hits(best.wiring), ws.hits(conf)):
        return WiringCase.CONFIG_WRONG
    return WiringCase.CONFIG_CLOSE


def _severity(facts: WiringFacts) -> Severity:
    case = facts.case
    if case in (WiringCase.NOT_ASCENDING, WiringCase.CONFIG_WRONG, WiringCase.CONFIG_MALFORMED):
        return Severity.ERROR
    if case == WiringCase.CONFIG_UNMATCHED:
        return Severity.WARNING
    if case == WiringCase.UNCONFIGURED:
        # Engines feed their default layers: an error when that wiring scores clearly worse,
        # or when no engine can serve the draft without ids; info only when it is the best one.
        default = facts.named.get(ENGINE_DEFAULT)
        if default is not None:
            if default.wiring == facts.best.wiring:
                return Severity.INFO
            return Severity.ERROR if facts.default_clearly_worse else "warning"
        if any(not f.serves for f in facts.engine_defaults):
            return Severity.ERROR
        serve = facts.named.get("serve")
        if not facts.engine_defaults and (serve is None or serve.wiring == facts.best.wiring):
            return Severity.INFO
        return Severity.WARNING
    return Severity.INFO


def _engine_ids(serving_cfg: ServingConfig) -> tuple[list[int], str] | None:
    engines = serving_cfg.engines
    if engines is None:
        return None
    return engines.vllm_ids, engines.sglang.text


def wiring_finding(
    ws: WiringSearch,
    results: list[WiringResult],
    names: NamedWirings,
    infos: Sequence[SlotInfo],
    serving_cfg: ServingConfig,
    *,
    shift: int,
    recommended: tuple[int, ...],
    assumes_config_fixes: bool = False,
    accept: dict[tuple[int, ...], float] | None = None,
    accept_samples: tuple[int, ...] = (),
    accept_bounded: frozenset[tuple[int, ...]] = frozenset(),
    accept_settings: str = "greedy",
) -> Finding:
    """The wiring finding for the recommended wiring (see `WiringCase` for the cases); accept:
    the accept length of some wirings (the recommended and the served ones), replayed greedy or
    expected at the sampling `accept_settings` names."""
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
        accept_settings=accept_settings,
        malformed=names.malformed,
        default_clearly_worse=ENGINE_DEFAULT in names.named
        and bool(clearly_better(bh, ws.hits(names.named[ENGINE_DEFAULT]))),
    )
    text = wiring_text(facts)
    return Finding(Kind.WIRING, _severity(facts), text.summary, text.fix, facts, wiring=best.wiring)


# --- words ---------------------------------------------------------------------------------------
def _unmatched(facts: WiringFacts) -> str:
    ids = facts.layer_ids
    d = ids.draft
    assert d is not None
    n = len(facts.best.wiring)
    if all(len(h) != n for h in d.hf):
        return f"its {d.where} {list(d.ids)} name {len(d.ids)} layers, but fc takes {n}"
    if d.convention == "hf":
        read = f"HF indices, as {_VLLM} reads the key"
    else:
        read = f"{CONVENTIONS.get(d.convention, d.convention)}: HF " + " or ".join(
            str(list(h)) for h in d.hf
        )
    return f"its {d.where} {list(d.ids)} ({read}) match no captured slot: {slots_source_text(ids)}"


CAPTURE_ENGINE = "eagle-inspect capture TARGET PROMPTS --out DIR --draft CKPT --engine {}"


def _accept_versus(served: WiringRef, best: WiringRef, settings: str) -> str:
    """' and logs accept len 1.30 instead of 2.73 at 3 steps, greedy' (the replayed chain; at a
    temperature the settings and 'expected'), or ''."""
    if served.accept_length is None or best.accept_length is None:
        return ""
    return (
        f" and logs accept len {_al(served)} instead of {_al(best)} at {ACCEPT_STEPS} steps, "
        f"{settings}"
    )


def _al(ref: WiringRef) -> str:
    """'2.60', or '>=2.60' where the replay's last rounds ran past what the samples hold of the
    target's continuation (a lower bound)."""
    assert ref.accept_length is not None
    return (">=" if ref.accept_bound else "") + f"{ref.accept_length:.2f}"


def _engine_defaults(facts: WiringFacts) -> str:
    """Which HF indices vLLM and SGLang feed a config without ids, and what that wiring scores
    (or why it cannot be scored here)."""
    L = facts.num_layers
    if not facts.engine_defaults:
        return (
            f": {_VLLM} and {_SGLANG} (before and since #25454) feed HF [2, L//2, L-3] of an "
            "L-layer target, and the layer count is unknown here (pass --target, or state "
            "num_hidden_layers in data_config.json)"
        )
    parts = []
    default = facts.named.get(ENGINE_DEFAULT)
    for feed in facts.engine_defaults:
        text = f"{feed.names} feed HF {list(feed.hf)} ([2, L//2, L-3] with L = {L}"
        if len(feed.hf) < 3:  # two of the three coincide on a small target
            text += f" is {[2, L // 2, L - 3]}; a layer listed twice is captured once"
        text += ")"
        if not feed.serves:
            text += (
                f": {len(feed.hf)} states for an fc of {len(facts.best.wiring)} blocks, so they "
                "cannot serve this draft at all"
            )
        elif feed.wiring is not None and default is not None and default.wiring == feed.wiring:
            if feed.wiring == facts.best.wiring:
                text += f": {default.label}, the best wiring"
            else:
                text += (
                    f": {default.label}, which scores {default.all_tok.fmt()} "
                    f"({-100 * (default.margin or 0.0):+.1f} points)"
                ) + _accept_versus(default, facts.best, facts.accept_settings)
        elif feed.missing:
            engine = feed.engine_keys[0]
            text += (
                f"; the samples lack HF {list(feed.missing)}, which "
                f"`{CAPTURE_ENGINE.format(engine)}` captures"
            )
        parts.append(text)
    return ": " + "; ".join(parts)


def _baked(facts: WiringFacts) -> bool:
    """The ids are a GGUF's baked `eagle3.target_layers` (their convention, named by the engine
    that bakes them), not a config's."""
    d = facts.layer_ids.draft
    return d is not None and d.convention == GGUF_IDS


def _wiring_fix(facts: WiringFacts, cfg_line: str) -> str:
    case, lab = facts.case, facts.best.label
    if case == WiringCase.NOT_ASCENDING:
        return (
            "write a checkpoint whose fc blocks are permuted so the ascending order computes the "
            f"same function: {WRITE_FIXED}; then configure the engines as in serving_config"
        )
    set_line = f"set {cfg_line} in the draft's config.json" if cfg_line else ""
    if case == WiringCase.CONFIG_MALFORMED and not _baked(facts):
        if set_line:
            return f"{set_line}: the ids that name the trained wiring {lab}, each layer once"
        return (
            f"write the ids of the trained wiring {lab} in the draft's config.json, each layer "
            "once (pass --slot-layers to get them as each engine reads them)"
        )
    if _baked(facts):
        # a GGUF's layers are baked in: the fix is the HF draft's config and a reconversion
        set_line = (
            "write the trained wiring's ids at the top level of the HF draft's config.json and "
            "convert it again (the gguf_layers finding gives the ids and the command)"
        )
        if case in (
            WiringCase.CONFIG_WRONG,
            WiringCase.CONFIG_UNMATCHED,
            WiringCase.CONFIG_MALFORMED,
        ):
            return set_line
    reread = reread_fix_text(facts.layer_ids)
    if case in (WiringCase.CONFIG_UNMATCHED, WiringCase.CONFIG_WRONG) and reread:
        return reread + ("; otherwise " + set_line if set_line else "")
    if case == WiringCase.CONFIG_WRONG:
        return set_line or "configure the engines to feed " + lab
    if case == WiringCase.UNCONFIGURED and cfg_line:
        return f"pin the trained wiring: set {cfg_line} in the draft's config.json"
    if case in (WiringCase.UNCONFIGURED, WiringCase.CONFIG_UNMATCHED):
        return set_line or "pass --slot-layers to get the engine ids for " + lab
    if case == WiringCase.CONFIGURED:
        return f"serve it with {cfg_line}" if cfg_line else ""
    return reread


def wiring_text(facts: WiringFacts) -> Text:
    """The wiring finding's words, by case (`WiringCase`)."""
    best, second, case = facts.best, facts.second, facts.case
    lab, bfmt = best.label, best.all_tok.fmt()
    margin = ""
    if second is not None:
        margin = f", {100 * (second.margin or 0.0):+.1f} points over the next {second.label}"
    if facts.top_ranked is not None:
        top = facts.top_ranked
        if case == WiringCase.CONFIGURED:
            # a neighbour ranked first within noise: the configured wiring stands
            margin += (
                f"; the top-ranked {top.label} ({top.all_tok.fmt()}) is not clearly better: "
                "these samples cannot tell them apart, so the configured ids stand"
            )
        else:
            margin += (
                f"; the top-ranked {top.label} ({top.all_tok.fmt()}) is not clearly better and "
                "needs a permuted checkpoint"
            )
    serve = facts.named.get("serve")
    asc = facts.best_ascending
    serve_txt = ""
    default = facts.named.get(ENGINE_DEFAULT)
    shown = default is not None and case == WiringCase.UNCONFIGURED
    if (
        serve is not None
        and serve.wiring != best.wiring
        and not (shown and serve.wiring == default.wiring)
    ):
        if not (
            case == WiringCase.NOT_ASCENDING and asc is not None and serve.wiring == asc.wiring
        ):
            serve_txt = f"; an engine feeding {serve.label} gets {serve.all_tok.fmt()}"
            serve_txt += _accept_versus(serve, best, facts.accept_settings)
    if not serve_txt and best.accept_length is not None:
        serve_txt = (
            f"; served so, an engine logs accept len {_al(best)} at {ACCEPT_STEPS} steps, "
            f"{facts.accept_settings}"
        )
    cfg_line = ""
    if facts.engine_ids is not None:
        vllm, sg = facts.engine_ids
        cfg_line = f"eagle_aux_hidden_state_layer_ids {vllm} for {_VLLM}, {sg}"
    readings = "".join("; " + reading_text(r, facts.layer_ids) for r in facts.layer_ids.readings)
    ref = facts.named.get("configured")
    if case == WiringCase.NOT_ASCENDING:
        if asc is not None:
            margin += f"; the best ascending order {asc.label} gets {asc.all_tok.fmt()}"
        summary = (
            f"the draft fits {lab} best ({bfmt}{margin}), an order no engine can feed: engines "
            "concatenate captured layers in ascending order"
        )
    elif case == WiringCase.CONFIG_WRONG and ref is not None:
        selects = "the GGUF's baked layers select" if _baked(facts) else "the config selects"
        summary = (
            f"{selects} {ref.label} ({ref.all_tok.fmt()}), but the draft was trained for "
            f"{lab} ({bfmt}, {100 * (ref.margin or 0.0):+.1f} points){readings}"
        )
    elif case == WiringCase.CONFIG_CLOSE and ref is not None:
        summary = (
            f"the best wiring {lab} ({bfmt}) is not clearly better than the configured "
            f"{ref.label} ({ref.all_tok.fmt()}){readings}"
        )
    elif case == WiringCase.CONFIG_MALFORMED and facts.malformed is not None:
        m = facts.malformed
        summary = (
            f"its {m.where} {list(m.ids)} {m.fault()}, so they select no wiring and each engine "
            f"reads them its own way. {feeds_text(m)}. The draft fits {lab} best ({bfmt}{margin})"
        )
    elif case == WiringCase.CONFIG_UNMATCHED:
        summary = f"the draft fits {lab} best ({bfmt}{margin}); {_unmatched(facts)}{readings}"
    elif case == WiringCase.UNCONFIGURED:
        summary = (
            f"the draft fits {lab} best ({bfmt}{margin}); its config names no aux layer ids, so "
            "engines feed their default layers" + _engine_defaults(facts)
        )
    else:
        summary = f"the draft fits its configured wiring {lab} best ({bfmt}{margin})"
    summary += serve_txt
    if facts.assumes_config_fixes:
        summary += " (scored with the config fixes the other findings name)"
    return Text(summary, _wiring_fix(facts, cfg_line))
