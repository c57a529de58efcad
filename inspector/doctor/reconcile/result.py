"""The reconciliation's result, shared by the greedy comparison (`reconcile`) and the one at a
temperature (`reconcile_sampled`): the verdict with its words as a typed value (`said`, one of
`words`' sentences), each wiring's figures, and the words of a wiring's serving config (the fix)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from inspector.doctor.phrasing import CONVERT_TO_GGUF
from inspector.doctor.reconcile.run_check import RunCheck
from inspector.doctor.reconcile.settle import Settlement
from inspector.doctor.serving import engine_configs, hf_indices, sglang_ids_text
from inspector.doctor.wiring.trained import TrainedWiring
from inspector.engines import Engine
from inspector.engines import engine as serving_engine
from inspector.engines.target_class import TargetClass
from inspector.formats.engine_log import EngineLog
from inspector.formats.target_config import read_target_class
from inspector.metrics.rounds import AcceptStats
from inspector.sample import SlotInfo
from inspector.serving.expectation import Expectation

# the engines' names from the registry (a rename is one edit in inspector/engines/)
_LLAMACPP, _VLLM = (
    Engine.LLAMACPP.display,
    Engine.VLLM.display,
)


class Verdict(str, Enum):
    AS_IS = "as_is"  # the engine's figure is the best wiring's: the draft is what it is
    WRONG_WIRING = "wrong_wiring"  # the engine's figure is another wiring's
    ENGINE_FAULT = "engine_fault"  # below every wiring's replay
    OTHER_DATA = "other_data"  # above every replay, or matching none
    # the figure is what the engine's synthetic (forced) acceptance gives: nothing of the draft
    SYNTHETIC = "synthetic"
    # the log equals a replay, but the witnesses disagree on which wiring the weights were
    # trained on (`settle`): no wiring is blamed and no fix given
    UNDECIDED = "undecided"
    # below the replay, and the per-request figures say why on the engine's side
    # (`reconcile_blame`): from one point on it drafted or accepted nothing, where the replay
    # of those rounds accepts (a gate that switched speculation off, as TensorRT-LLM's
    # SpeculationGate does for good) ...
    ENGINE_GATE = "engine_gate"
    # ... or one server slot's requests accept far less than the replay while another slot's
    # equal it (llama.cpp -np 2)
    ENGINE_SLOT = "engine_slot"
    # several runs of the same draft (`reconcile_runs`): this run's accept length departs from
    # the replay of its requests while another run's equals it: its backend or build
    ENGINE_BACKEND = "engine_backend"
    # the target declares hyper-connections (hc_mult > 1) and the engine's accept length sits at
    # about 1.0 where the replay accepts more: the hidden state the draft is fed is not the one
    # it was trained on (`reconcile_hidden_state`)
    TARGET_HIDDEN_STATE = "target_hidden_state"


class Sentence(Protocol):
    """A verdict's words as a typed value (one of `words`' sentences): its fields are what the
    sentence quotes, its str() the sentence."""

    def __str__(self) -> str: ...


@dataclass(frozen=True)
class Gap:
    """The first round where the engine accepted less than the replay."""

    request: str  # the engine's file:line
    sample: int
    round: int
    engine: int
    replay: int
    position: int  # the round's start in the sample

    def to_dict(self) -> dict:
        return {
            "request": self.request,
            "sample": self.sample,
            "round": self.round,
            "engine_accepted": self.engine,
            "replay_accepted": self.replay,
            "position": self.position,
        }


@dataclass(frozen=True)
class GateOff:
    """Where the engine stopped speculating: from `request` (its file:line; `round` of it where
    the log gives each round, else the whole request) on, it accepted nothing, where the replay
    of the same rounds accepts `replay_accepted`. Accept lengths before and after that point,
    the engine's against the replay's."""

    request: str  # a windowed log's: the first line printing 1.00
    sample: int | None  # None: a windowed log's lines (no request paired)
    round: int | None  # None: request-level figures (the gate is at the request's start)
    position: int | None  # the round's start in the sample
    requests_after: int  # requests from that point on (the first included)
    engine_rounds_after: int | None  # rounds the engine still counted (None: not logged)
    engine_accepted_after: int  # 0
    replay_rounds_after: int
    replay_accepted_after: int
    engine_accept_length_before: float
    replay_accept_length_before: float
    replay_accept_length_after: float
    # a windowed log's lines from that point on (None: per-request figures); the replay's
    # rounds after are then the least those lines cover (#running-req x decode_log_interval)
    # and its accepted tokens its pooled accept length over them
    windows_after: int | None = None

    def to_dict(self) -> dict:
        return {
            "request": self.request,
            "windows_after": self.windows_after,
            "sample": self.sample,
            "round": self.round,
            "position": self.position,
            "requests_after": self.requests_after,
            "engine_rounds_after": self.engine_rounds_after,
            "engine_accepted_after": self.engine_accepted_after,
            "engine_accept_length_after": 1.0,
            "replay_rounds_after": self.replay_rounds_after,
            "replay_accepted_after": self.replay_accepted_after,
            "replay_accept_length_after": self.replay_accept_length_after,
            "engine_accept_length_before": self.engine_accept_length_before,
            "replay_accept_length_before": self.replay_accept_length_before,
        }


@dataclass(frozen=True)
class SlotCheck:
    """One server slot's paired requests: the engine's figures against the replay's."""

    slot: int
    requests: int
    engine_accepted: int
    engine_drafted: int | None  # drafted tokens (None: not logged)
    engine_rounds: int | None  # None: not logged (llama-server's timings)
    replay_accepted: int
    replay_rounds: int
    departs: bool  # far below the replay
    equal: bool  # the replay's figure (count for count, or within rounding)

    @property
    def engine_accept_length(self) -> float | None:
        r = self.engine_rounds
        return 1 + self.engine_accepted / r if r else None

    @property
    def replay_accept_length(self) -> float | None:
        r = self.replay_rounds
        return 1 + self.replay_accepted / r if r else None

    def to_dict(self) -> dict:
        return {
            "slot": self.slot,
            "requests": self.requests,
            "engine_accepted": self.engine_accepted,
            "engine_drafted": self.engine_drafted,
            "engine_rounds": self.engine_rounds,
            "engine_accept_length": self.engine_accept_length,
            "replay_accepted": self.replay_accepted,
            "replay_rounds": self.replay_rounds,
            "replay_accept_length": self.replay_accept_length,
            "departs": self.departs,
            "equal": self.equal,
        }


@dataclass(frozen=True)
class Blame:
    """Which side a shortfall is on, where the figures say: from the per-request figures
    (`reconcile_blame`) "gate" (`gate`) or "slot" (`slot`, the departing slot; `slots`, every
    slot's figures); across runs (`reconcile_runs`) "backend" (`run`, the departing run; `runs`,
    every run's figures; `wiring`, the replay they are held to); from the target's config
    (`reconcile_hidden_state`) "hidden_state" (`hc_mult`)."""

    kind: str  # "gate" | "slot" | "backend" | "hidden_state"
    words: Sentence  # the sentence naming the side (one of `words`' values)
    paired_by: str  # how the engine's requests were paired with samples
    gate: GateOff | None = None
    slot: int | None = None
    slots: tuple[SlotCheck, ...] = ()
    run: str | None = None
    runs: tuple[RunCheck, ...] = ()
    wiring: str | None = None
    hc_mult: int | None = None

    @property
    def side(self) -> str:
        """The side at fault: the engine, or the target where its hidden state is not what
        the draft reads."""
        return "target" if self.kind == "hidden_state" else "engine"

    def to_dict(self) -> dict:
        return {
            "side": self.side,
            "kind": self.kind,
            "words": str(self.words),
            "paired_by": self.paired_by,
            "gate": self.gate.to_dict() if self.gate is not None else None,
            "slot": self.slot,
            "slots": [c.to_dict() for c in self.slots],
            "run": self.run,
            "runs": [c.to_dict() for c in self.runs],
            "wiring": self.wiring,
            "hc_mult": self.hc_mult,
        }


@dataclass(frozen=True)
class PositionCheck:
    """At a temperature: the engine's share of rounds accepting >= `depth` drafted tokens
    against the share the rule is expected to give (`reconcile_sampled`)."""

    depth: int  # 1-based
    engine_accepted: int
    engine_rounds: int
    expected_share: float
    z: float

    @property
    def engine_share(self) -> float:
        return self.engine_accepted / self.engine_rounds if self.engine_rounds else 0.0

    def to_dict(self) -> dict:
        return {
            "depth": self.depth,
            "engine_accepted": self.engine_accepted,
            "engine_share": self.engine_share,
            "expected_share": self.expected_share,
            "z": self.z,
        }


@dataclass
class WiringCheck:
    label: str
    wiring: tuple[int, ...]
    stats: AcceptStats
    equal: bool  # the engine's figure equals this replay's (counts, or within rounding)
    requests_equal: int | None = None  # requests whose every round equals the replay's
    # at a temperature: the rule's expectation on the loop's rounds, and the engine's logged
    # share per depth against it (None: the log has no per-position counts)
    expected: Expectation | None = None
    positions: list[PositionCheck] | None = None

    def to_dict(self) -> dict:
        d = {
            "label": self.label,
            "wiring": list(self.wiring),
            "accept_length": self.stats.accept_length,
            "accept_length_is_lower_bound": self.stats.is_bound,
            "rounds": self.stats.rounds,
            "accepted": self.stats.accepted,
            "equal": self.equal,
            "requests_equal": self.requests_equal,
        }
        if self.expected is not None:
            d["expected"] = self.expected.to_dict()
        if self.positions is not None:
            d["positions"] = [c.to_dict() for c in self.positions]
        return d


@dataclass
class Reconciliation:
    log: EngineLog
    checks: list[WiringCheck]
    verdict: Verdict
    said: Sentence  # the verdict's words as a typed value (`words`): its fields what it quotes
    fix: str | None = None
    matched: str | None = None  # the label of the wiring the engine's figure equals
    best: str | None = None
    gap: Gap | None = None
    faults: list[str] = field(default_factory=list)
    requests_matched: int = 0  # engine requests paired with a sample
    notes: list[str] = field(default_factory=list)
    serving_config: dict | None = None
    # the wiring search's answer (None: not run, the best replay stands for the trained wiring)
    trained: TrainedWiring | None = None
    configured: str | None = None  # the label of the wiring the draft's config names
    # why the replay at a fixed K is an upper bound of the engine's figure, not an equal (its
    # draft length adapts, its log gives no schedule); None: held count for count
    bound: str | None = None
    scheduled: int = 0  # paired requests replayed under the engine's own schedule
    synthetic: dict | None = None  # the synthetic-acceptance setting held against the figure
    # how the evidence settled the trained wiring (`settle`; None: no wiring search ran)
    settlement: Settlement | None = None
    # the engine's side named from its per-request figures (`reconcile_blame`; None: not found)
    blame: Blame | None = None

    @property
    def summary(self) -> str:
        """The verdict in words (`said`'s sentence)."""
        return str(self.said)

    def to_dict(self) -> dict:
        log = self.log
        return {
            "engine_log": {
                "path": str(log.path),
                "engine": log.engine,
                "source": log.source,
                "accept_length": log.accept_length,
                "rounds": log.rounds,
                "accepted": log.accepted,
                "accepted_per_pos": log.accepted_per_pos,
                "lines": log.lines,
                "requests": len(log.requests),
                "build": log.start.to_dict() if log.start is not None else None,
            },
            "requests_matched": self.requests_matched,
            "wirings": [c.to_dict() for c in self.checks],
            "verdict": self.verdict.value,
            "matched": self.matched,
            "best": self.best,
            # the three wirings the verdict names: what the weights were trained on (the wiring
            # search's), what the config names, and what the engine fed (its replay equals the log)
            "wirings_named": {
                "trained": self.best if self.trained is not None else None,
                "configured": self.configured,
                "fed": self.matched,
            },
            "trained_search": self.trained.to_dict() if self.trained is not None else None,
            "summary": self.summary,
            "fix": self.fix,
            "first_gap": self.gap.to_dict() if self.gap else None,
            "engine_fault_classes": self.faults,
            "serving_config": self.serving_config,
            "scheduled_requests": self.scheduled,
            "replay_is_upper_bound": self.bound is not None,
            "adaptive": self.bound,
            "synthetic": self.synthetic,
            "settlement": self.settlement.to_dict() if self.settlement is not None else None,
            "blame": self.blame.to_dict() if self.blame is not None else None,
            "notes": self.notes,
        }


def short_label(label: str) -> str:
    """'train [embed, L2, L4]' -> '[embed, L2, L4]'."""
    return label[label.index("[") :] if "[" in label else label


def config_for(
    wiring: Sequence[int], infos: Sequence[SlotInfo], steps: int, *, target: object = None
) -> dict | None:
    """The engines' settings feeding `wiring` (None: a slot's HF index is unknown). target: the
    target's class (what `engine_conventions.target_class` reads: a TargetClass, its config,
    an architecture or model_type name; None: unknown, SGLang's ids of every reading)."""
    hf = hf_indices(wiring, infos)
    if any(k is None for k in hf):
        return None
    last = next((s.hf_index for s in infos if s.verifier and not s.post_norm), None)
    return {
        "hf_indices": hf,
        **engine_configs(
            [k for k in hf if k is not None], last_layer=last, n_tokens=steps, target=target
        ),
    }


def fix_text(best: WiringCheck, label: dict[str, str], cfg: dict, engine: str = "") -> str:
    """The fix's words: the ids each engine needs to feed `best` (`cfg`: from `config_for`,
    which holds the target's class). Under an engine that bakes the ids (llama.cpp) they are baked
    into the GGUF at conversion: the fix is the HF config's top-level ids (the one place its
    converter reads) and a reconversion, first."""
    vllm_ids = cfg["vllm"]["config"]["eagle_aux_hidden_state_layer_ids"]
    others = (
        f"eagle_aux_hidden_state_layer_ids {vllm_ids} for {_VLLM}, {sglang_ids_text(cfg['sglang'])}"
    )
    if engine and serving_engine(engine).bakes_ids:
        cmd = CONVERT_TO_GGUF.format(
            hf_draft="HF_DRAFT_DIR", target="TARGET_DIR", outfile="draft.gguf"
        )
        return (
            f"serve it fed {label[best.label]}: {_LLAMACPP} bakes the ids into the GGUF, so write "
            f"eagle_aux_hidden_state_layer_ids {vllm_ids} at the top level of the HF draft's "
            f"config.json (the one place its converter reads them) and convert it again "
            f"({cmd}); {others}"
        )
    return f"serve it fed {label[best.label]}: {others}"


def report_target(report) -> TargetClass | None:
    """The target's class where the report names the target's folder (`verifier`, the folder
    the target's head was read from)."""
    return read_target_class(getattr(report, "verifier", None))


def serving_fix(
    verdict, best, conf, report, label: dict[str, str]
) -> tuple[dict | None, str | None]:
    """The best wiring's serving config (where the verdict names a wiring, or the best is not
    the configured one) and, for the wrong wiring, the fix's words. SGLang's ids follow the
    class of the target the report read (unknown without one)."""
    if not (verdict in (Verdict.WRONG_WIRING, Verdict.AS_IS) or best is not conf):
        return None, None
    cfg = config_for(best.wiring, report.slots, report.spec.steps, target=report_target(report))
    engine = getattr(getattr(report, "engine", None), "value", "")
    fix = (
        fix_text(best, label, cfg, engine)
        if verdict is Verdict.WRONG_WIRING and cfg is not None
        else None
    )
    return cfg, fix


def reference(
    checks: list[WiringCheck],
    scored: list[WiringCheck],
    trained: tuple[Sequence[int], TrainedWiring] | None,
    key=None,
) -> WiringCheck:
    """The wiring the verdict holds the others to: the trained one, the best replay of the
    wiring search's contenders where the search ran (step 0 found them alike; several steps
    settle it), else the best replay of all those tried (`key`: how a check ranks; default its
    accept length)."""
    by = key or (lambda c: c.stats.accept_length or 0.0)
    if trained is not None:
        contenders = [checks[i] for i in trained[0] if checks[i] in scored]
        if contenders:
            return max(contenders, key=by)
    return max(scored, key=by)


def config_fix(best: WiringCheck, conf: WiringCheck, report, label: dict[str, str]) -> str | None:
    """The config's ids to write when the engine fed the trained wiring but the config names
    another (an engine that reads the config would feed that one)."""
    cfg = config_for(best.wiring, report.slots, report.spec.steps, target=report_target(report))
    if cfg is None:
        return None
    engine = getattr(getattr(report, "engine", None), "value", "")
    return "write the trained wiring's ids into the draft's config: " + fix_text(
        best, label, cfg, engine
    )
