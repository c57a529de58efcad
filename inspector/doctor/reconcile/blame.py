"""Whom a bad log blames: where an engine's figure lies below the replay of the same requests (or
matches none), its per-request figures can say the shortfall is the engine's own doing, not the
draft's wiring or weights. Two patterns, each named with its point or its slot:

- a gate: from one point on (a round of a request, or a request, in the log's order) the engine
  accepted nothing, or drafted nothing at all, where the replay of those very rounds accepts,
  and before it the engine accepted what the replay does. TensorRT-LLM's `SpeculationGate`
  (`acceptance_window`, `acceptance_length_threshold` in the speculative config, PyTorch
  backend) turns speculation off for good once the rolling accept length over its last
  completed requests falls below the threshold: every later round is a plain decode, accept
  length exactly 1.
  SGLang's text log has no requests but windows (`accept len` over decode_log_interval decode
  iterations, `windowed_log`): there the point is the first of at least two last lines that all
  print accept len 1.00, where the lines before it pool (weighted by #running-req, as SGLang
  pools them) to the replay's accept length within DRIFT, and the replay's accept length over
  the rounds those lines cover at the least (#running-req x decode_log_interval, 1 where the log
  states none) comes to at least MIN_SHORT tokens.
- a slot: the requests one server slot served accept far less than the replay while another
  slot's equal it (llama-server -np 2, where one slot sat at 0.0 acceptance: llama.cpp issue
  #27572); llama-server's slot lines carry the slot id (`formats.llamacpp_log`).

Accept lengths are compared (1 + accepted / rounds), never a rate. Where the engine gives no
rounds (llama-server's timings), its accepted tokens are counted over the replay's rounds of the
same requests. Pure: the result, the replay per sample and the pairing in; a result out.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from inspector.doctor.reconcile import words
from inspector.doctor.reconcile.replay_counts import counted, request_rounds
from inspector.doctor.reconcile.result import Blame, GateOff, Reconciliation, SlotCheck, Verdict
from inspector.engines import Engine, engine, engine_words
from inspector.formats.engine_figures import EngineLog, RequestFigures
from inspector.formats.llamacpp_log import LlamacppLog
from inspector.serving.sample_replay import SampleReplay

# the engines' names from the registry (a rename is one edit in inspector/engines/)
_LLAMACPP = Engine.LLAMACPP.display

# Accept lengths within 8% of each other are one figure (the half-precision drift `reconcile`
# allows, and a slot line's rounds are at times the nearest count); below that, and short by at
# least MIN_SHORT accepted tokens, a figure departs.
DRIFT = 0.08
MIN_SHORT = 5

# the verdicts a pattern of the engine's own may still explain (the draft's side is not blamed)
OPEN = (Verdict.ENGINE_FAULT, Verdict.OTHER_DATA)


def paired_words(res: Reconciliation) -> str:
    """How a result's figures were held: its requests paired with samples, or pooled."""
    if res.requests_matched:
        return f"{res.requests_matched} requests paired with samples"
    return "pooled: the whole log against the replay of every sample"


GATE_CLASS = (
    "a speculation gate switched drafting off: the engine stops drafting for good once its "
    "rolling accept length falls below a threshold (TensorRT-LLM: acceptance_window and "
    "acceptance_length_threshold in the speculative config); unset them or lower the threshold"
)
SLOT_CLASS = (
    "one server slot's state: its draft context, KV cache or sampler is not the other slots' "
    f"(llama-server -np N: {_LLAMACPP} issue #27572, one slot at 0.0 acceptance); serve with one "
    f"slot (-np 1) to confirm, and update {_LLAMACPP}"
)


@dataclass(frozen=True)
class Paired:
    """One engine request and the replay of its sample, as the engine counts rounds."""

    req: RequestFigures
    sample: int
    ours: list[int]  # the replay's accepted count per counted round
    starts: list[int]  # each counted round's start in the sample

    @property
    def logged(self) -> list[int] | None:
        """The engine's count per round (vLLM's per_step_accepted), where it gives them."""
        return self.req.counted_accepted

    @property
    def accepted(self) -> int:
        logged = self.logged
        return sum(logged) if logged is not None else self.req.accepted or 0

    @property
    def rounds(self) -> int | None:
        logged = self.logged
        return len(logged) if logged is not None else self.req.rounds


def blamed(
    result: Reconciliation,
    per_sample: dict[int, SampleReplay],
    pairs: dict[int, RequestFigures],
) -> Reconciliation:
    """`result` with the engine's side named where its verdict is an engine-side fault or other
    data and the per-request figures show a gate or a departing slot; else `result` itself.
    per_sample: the replay the verdict held the log to, by sample; pairs: `pair_requests`'."""
    if result.verdict not in OPEN:
        return result
    blame = windows_gate(result.log, per_sample)
    if blame is None:
        paired, how = pair_all(result.log, per_sample, pairs)
        if len(paired) < 2:
            return result
        blame = gate_off(result.log, paired, how) or departing_slot(result.log, paired, how)
    if blame is None:
        return result
    verdict = Verdict.ENGINE_GATE if blame.kind == "gate" else Verdict.ENGINE_SLOT
    return replace(
        result,
        verdict=verdict,
        said=words.Blamed(words.Logged.of(result.log), blame.words),
        faults=[GATE_CLASS if blame.kind == "gate" else SLOT_CLASS],
        blame=blame,
        notes=[*result.notes, f"pooled over every request: {result.summary}"],
    )


def pair_all(
    log: EngineLog, per_sample: dict[int, SampleReplay], pairs: dict[int, RequestFigures]
) -> tuple[list[Paired], str]:
    """The engine's requests with their samples' replays, in the log's order, and how they
    were paired: `pairs` where the log's requests were paired, else llama-server's slot lines
    in the order they reached the server where there is one per sample."""
    found: list[tuple[RequestFigures, int]] = []
    if pairs:
        found = [(r, i) for i, r in pairs.items() if i in per_sample]
        ids = all(r.prompt_ids is not None and r.output_ids is not None for r in log.requests)
        how = "token ids" if ids else "order"
    elif isinstance(log, LlamacppLog) and len(log.slot_requests) == len(per_sample):
        found = list(zip(log.slot_requests, sorted(per_sample), strict=True))
        tasks = all(getattr(r, "task", None) is not None for r in log.slot_requests)
        how = "llama-server's task order" if tasks else "the log's order"
    else:
        return [], "none"
    out = []
    for r, i in sorted(found, key=lambda x: x[0].line):
        rep = per_sample[i]
        starts = [int(rep.starts[k]) for k in counted(rep)]
        out.append(Paired(r, i, request_rounds(rep), starts))
    return out, how


def _al(accepted: int, rounds: int) -> float:
    return 1 + accepted / rounds if rounds else 1.0


def gate_off(log: EngineLog, paired: list[Paired], how: str) -> Blame | None:
    """From the last request that accepted anything on, in the log's order: where every later
    round (of that request past its last accepted round, and every later request) accepted
    nothing while the replay of them accepts at least MIN_SHORT tokens, and the engine's accept
    length before that point is the replay's (within DRIFT), a gate switched speculation off.
    A gate weighs completed requests: at least one whole request lies before the point; and it
    stays off: at least two requests lie after it (the one it switched in counted)."""
    j = len(paired) - 1
    while j >= 0 and paired[j].accepted == 0:
        j -= 1
    if j < 0:
        return None  # nothing accepted at all: no point where it switched off
    last = paired[j]
    cut: int | None = None  # the round of `last` from which on it accepted nothing
    if last.logged is not None:
        cut = max(k for k, x in enumerate(last.logged) if x) + 1
        if cut >= len(last.ours):
            cut = None
    if cut is None:
        if j + 1 == len(paired):
            return None
        first, after = paired[j + 1], paired[j + 1 :]
        before = paired[: j + 1]
        round_ = 0 if first.logged is not None else None
        position = first.starts[0] if first.starts else None
        pre = [(p.accepted, p.rounds, sum(p.ours), len(p.ours)) for p in before]
        post_ours = [x for p in after for x in p.ours]
        post_engine = [p.rounds for p in after]
    elif j == 0:
        return None  # the gate weighs completed requests: none completed before this point
    else:
        first, after = last, paired[j + 1 :]
        assert last.logged is not None
        round_, position = cut, last.starts[cut]
        pre = [(p.accepted, p.rounds, sum(p.ours), len(p.ours)) for p in paired[:j]]
        pre.append((sum(last.logged[:cut]), cut, sum(last.ours[:cut]), cut))
        post_ours = last.ours[cut:] + [x for p in after for x in p.ours]
        post_engine = [len(last.logged) - cut] + [p.rounds for p in after]
        after = [last, *after]
    if len(after) < 2:
        return None  # "for good": one request short is a fault of that request's
    y = sum(post_ours)
    e_pre = sum(a for a, _, _, _ in pre)
    r_pre = sum(r for _, _, _, r in pre)
    # the engine's rounds before the point, where it gives each request's (else the replay's)
    known = all(n is not None for _, n, _, _ in pre)
    e_rounds = sum(n or 0 for _, n, _, _ in pre) if known else r_pre
    al_e, al_r = _al(e_pre, e_rounds), _al(sum(a for _, _, a, _ in pre), r_pre)
    if y < MIN_SHORT or e_pre == 0 or al_e < al_r * (1 - DRIFT):
        return None
    rounds_after = None if any(n is None for n in post_engine) else sum(post_engine or [0])
    gate = GateOff(
        first.req.where,
        first.sample,
        round_,
        position,
        len(after),
        rounds_after,
        0,
        len(post_ours),
        y,
        al_e,
        al_r,
        _al(y, len(post_ours)),
    )
    said = words.GateWords(gate, engine_words(log.engine), how)
    return Blame("gate", said, how, gate=gate)


def windows_gate(log: EngineLog, per_sample: dict[int, SampleReplay]) -> Blame | None:
    """A gate in a windowed log's lines (SGLang's decode lines: the module docstring); None where
    the log has no windows or they show none."""
    if not (engine(log.engine).windowed_log and log.source == "log" and log.windows):
        return None
    rows = log.windows
    j = len(rows) - 1
    while j >= 0 and rows[j].accept_length < 1.005:  # prints as 1.00: nothing accepted
        j -= 1
    after = rows[j + 1 :]
    if j < 0 or len(after) < 2:
        return None  # nothing accepted at all, or not "for good"
    stats = [s.stats for s in per_sample.values()]
    rounds, accepted = sum(st.rounds for st in stats), sum(st.accepted for st in stats)
    if not rounds:
        return None
    al_r = 1 + accepted / rounds

    def weight(w) -> int:
        return w.running if w.running is not None else 1

    before = rows[: j + 1]
    al_e = sum(w.accept_length * weight(w) for w in before) / sum(weight(w) for w in before)
    covered = sum(weight(w) for w in after) * (log.decode_log_interval or 1)
    y = (al_r - 1) * covered
    if abs(al_e - al_r) > DRIFT * al_r or y < MIN_SHORT:
        return None
    first = after[0]
    gate = GateOff(
        first.where,
        None,
        None,
        None,
        0,
        None,
        0,
        covered,
        round(y),
        al_e,
        al_r,
        al_r,
        windows_after=len(after),
    )
    said = words.WindowsGateWords(gate, engine_words(log.engine), log.decode_log_interval)
    return Blame("gate", said, "windows", gate=gate)


def slot_checks(paired: list[Paired]) -> list[SlotCheck]:
    """Each slot's paired requests (those whose figures carry a slot id), the engine's figures
    against the replay's."""
    by: dict[int, list[Paired]] = {}
    for p in paired:
        slot = getattr(p.req, "slot", None)
        if slot is not None:
            by.setdefault(slot, []).append(p)
    out = []
    for slot, ps in sorted(by.items()):
        acc = sum(p.accepted for p in ps)
        ours, rounds = sum(sum(p.ours) for p in ps), sum(len(p.ours) for p in ps)
        known = all(p.rounds is not None for p in ps)
        e_rounds = sum(p.rounds or 0 for p in ps) if known else None
        drafted = [p.req.drafted_tokens for p in ps]
        al_e, al_r = _al(acc, e_rounds if e_rounds is not None else rounds), _al(ours, rounds)
        departs = al_e < al_r * (1 - DRIFT) and ours - acc >= MIN_SHORT
        out.append(
            SlotCheck(
                slot,
                len(ps),
                acc,
                None if any(d is None for d in drafted) else sum(d or 0 for d in drafted),
                e_rounds,
                ours,
                rounds,
                departs,
                abs(al_e - al_r) <= DRIFT * al_r,
            )
        )
    return out


def departing_slot(log: EngineLog, paired: list[Paired], how: str) -> Blame | None:
    """The slot whose requests accept far less than the replay while another slot's equal it
    (None: fewer than two slots logged, none departs, or none equals the replay)."""
    checks = slot_checks(paired)
    if len(checks) < 2:
        return None
    bad = [c for c in checks if c.departs]
    good = [c for c in checks if c.equal]
    if not bad or not good:
        return None
    worst = min(bad, key=lambda c: c.engine_accepted / max(c.replay_accepted, 1))
    others = tuple(c.slot for c in bad if c is not worst)
    said = words.SlotWords(worst, tuple(good), others, engine_words(log.engine), how)
    return Blame("slot", said, how, slot=worst.slot, slots=tuple(checks))
