"""The evidence `reconcile` weighs before it names a trained wiring (`settle`): each wiring's
counts per request as the engine counts them, the settlement over the step-0 search, the fc
fingerprint and the paired replays, and the words of the witnesses and of a fix among wirings
the samples cannot tell apart."""

from __future__ import annotations

from collections.abc import Sequence

from inspector.doctor.reconcile.replay_counts import request_rounds
from inspector.doctor.reconcile.result import WiringCheck, config_for, report_target
from inspector.doctor.reconcile.settle import Settlement, clearly_below, settle


def request_counts(wa, pairs) -> dict[int, tuple[int, int]]:
    """(accepted, rounds) per request the engine counted, as the engine counts it (the paired
    ones where requests were paired)."""
    out = {}
    for s in wa.per_sample:
        if pairs and s.index not in pairs:
            continue
        rounds = request_rounds(s)
        out[s.index] = (int(sum(rounds)), len(rounds))
    return out


def check_of(checks: Sequence[WiringCheck], wiring) -> WiringCheck | None:
    return next((c for c in checks if wiring is not None and c.wiring == tuple(wiring)), None)


def settled(checks, counts, trained, conf, label) -> Settlement:
    """The trained wiring as the step-0 search, the fc fingerprint and the replays of these
    requests settle it (`settle`)."""
    ti, t = trained
    contenders = [checks[i].wiring for i in ti]
    by = {c.wiring: c for c in checks}

    def words(w) -> str:
        c = by.get(tuple(w))
        return label(c) if c is not None else str(list(w))

    return settle(
        contenders[0] if contenders else t.wiring,
        contenders,
        conf.wiring if conf is not None else None,
        t.clearly,
        counts,
        fingerprint_flags_configured=t.fingerprint_flags,
        label=words,
    )


def clearly_worse(m: WiringCheck, best: WiringCheck, counts) -> bool:
    """The replay of `m` accepts clearly less than `best`'s on the same requests (the paired
    interval excludes 0): noise in a few requests is never a wrong wiring."""
    return m is not best and clearly_below(m.wiring, best.wiring, counts)


def ambiguous_fix(fix: str, settlement: Settlement, checks, report, label) -> str:
    """The fix where the evidence cannot tell the trained wiring from its neighbours: the fix
    for the wiring named (its engine's own steps kept), then each neighbour with its HF
    indices, and what would settle between them."""
    by = {c.wiring: c for c in checks}
    parts = []
    for w in settlement.indistinct:
        c = by.get(w)
        if c is None:
            continue
        cfg = config_for(c.wiring, report.slots, report.spec.steps, target=report_target(report))
        hf = cfg.get("hf_indices") if isinstance(cfg, dict) else None
        parts.append(f"{label[c.label]}" + (f" (HF indices {list(hf)})" if hf else ""))
    if not parts:
        return fix
    return (
        f"{fix}. These samples cannot settle the trained wiring among it and "
        + ", ".join(parts)
        + ": if the figure stays low served so, serve those; more samples (eagle-inspect "
        "doctor on the training data), or --target for serving-exact samples, settle it"
    )


def evidence_lines(settlement: Settlement, checks, label) -> list[str]:
    """Each witness on the trained wiring, and the wirings the evidence cannot tell apart."""
    out = [f"{w.name}: {w.says}" for w in settlement.witnesses]
    by = {c.wiring: c for c in checks}
    same = [label[by[w].label] for w in settlement.indistinct if w in by]
    if settlement.wiring is not None and same:
        named = by.get(settlement.wiring)
        out.append(
            f"the evidence cannot tell {', '.join(same)} from "
            f"{label[named.label] if named is not None else settlement.wiring}: within noise "
            "on these samples and requests"
        )
    return out
