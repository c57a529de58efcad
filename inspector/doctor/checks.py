"""The doctor's checks other than the wiring search: each returns Findings with figures and a fix."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from inspector.doctor.report import Finding
from inspector.doctor.search import Progress, Scorer, clearly_better, paired_hits_z
from inspector.draft import Draft, RopeConfig
from inspector.errors import InputError
from inspector.evaluate import Evaluator
from inspector.formats.tensorfiles import read_json
from inspector.metrics import Counts
from inspector.sample import SlotInfo

Z_CLEAR = 3.0  # paired z for "clearly more accurate"
MARGIN_CLEAR = 0.02  # and at least this many accuracy points (fraction)
MARGIN_ERROR = 0.05  # a gain this large makes the finding an error rather than a warning
NORM_RATIO_FLAG = 2.0  # fc fingerprint: projected norm off by this factor from the best wiring's


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def counts_of(hits: np.ndarray) -> Counts:
    return Counts(int(hits.sum()), int(hits.size))


def counts_dict(hits: np.ndarray) -> dict:
    return counts_of(hits).to_dict()


def wiring_label(w: Sequence[int] | None, infos: Sequence[SlotInfo]) -> str:
    if w is None:
        return "-"
    return "[" + ", ".join(infos[i].label if i < len(infos) else f"s{i}" for i in w) + "]"


def _join(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _severity_for_gain(gain: float) -> str:
    return "error" if gain >= MARGIN_ERROR else "warning"


# --- vocab_map ---------------------------------------------------------------------------------
def raw_vocab_tensors(draft: Draft) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """d2t and t2d exactly as stored in the checkpoint (the loaded VocabMap may be repaired)."""
    if draft.stored_vocab is None:
        return draft.vocab.d2t.cpu(), draft.vocab.t2d.cpu()
    return draft.stored_vocab.d2t, draft.stored_vocab.t2d


def analyse_vocab(d2t: torch.Tensor | None, t2d: torch.Tensor | None, d: int, v: int) -> dict:
    """Static faults of a stored d2t/t2d pair. Returns {"problems": [(severity, text)], ...}."""
    out: dict = {
        "draft_vocab_size": d,
        "vocab_size": v,
        "problems": [],
        "d2t": "absent",
        "fixable": False,
    }
    probs: list[tuple[str, str]] = out["problems"]
    if d2t is None:
        if t2d is not None:
            probs.append(("error", "t2d is stored without d2t: engines need d2t to map draft ids"))
        elif d != v:
            probs.append(("error", f"no d2t but draft_vocab_size {d} != vocab_size {v}"))
        return out
    d2t = d2t.long().flatten()
    out["d2t"] = "offsets"
    if d2t.numel() != d:
        probs.append(("error", f"d2t has {d2t.numel()} entries, draft_vocab_size is {d}"))
        return out
    ar = torch.arange(d)
    as_off = ar + d2t
    off_in_range = bool(((as_off >= 0) & (as_off < v)).all())
    abs_valid = bool(((d2t >= 0) & (d2t < v)).all()) and d2t.unique().numel() == d
    mask = t2d.flatten().bool() if t2d is not None else None
    ids_t2d = mask.nonzero().flatten() if mask is not None and mask.numel() == v else None
    out["first_entries"] = [int(x) for x in d2t[:6]]
    if (
        ids_t2d is not None
        and d > 1
        and torch.equal(ids_t2d, d2t)
        and not torch.equal(ids_t2d, as_off)
    ):
        out["d2t"] = "absolute"
    elif not off_in_range and abs_valid:
        out["d2t"] = "absolute"
    if out["d2t"] == "absolute":
        bad = int(((as_off < 0) | (as_off >= v)).sum())
        out["out_of_range_as_offsets"] = bad
        probs.append(
            (
                "error",
                "d2t holds absolute target ids, not offsets: engines compute target = draft id + d2t, "
                + (
                    f"which leaves [0, {v}) for {bad} of {d} ids"
                    if bad
                    else "which maps draft ids to the wrong tokens"
                ),
            )
        )
        out["fixable"] = True
        target_ids = d2t
    else:
        if not off_in_range:
            bad = int(((as_off < 0) | (as_off >= v)).sum())
            probs.append(("error", f"{bad} of {d} draft ids map outside the target vocab [0, {v})"))
            return out
        target_ids = as_off
    dup = d - int(target_ids.unique().numel())
    if dup:
        probs.append(("error", f"{dup} draft ids map to a target id another draft id already has"))
    if mask is not None:
        if mask.numel() != v:
            probs.append(("error", f"t2d has {mask.numel()} entries, vocab_size is {v}"))
        else:
            n_true = int(mask.sum())
            out["t2d_count"] = n_true
            if n_true != d:
                probs.append(("error", f"t2d marks {n_true} tokens, draft_vocab_size is {d}"))
                out["fixable"] = not dup
            elif not torch.equal(ids_t2d, target_ids.sort().values):
                differ = int((~mask[target_ids]).sum())
                probs.append(
                    (
                        "error",
                        f"t2d disagrees with d2t: {differ} of the ids d2t maps to are not marked in t2d",
                    )
                )
                out["fixable"] = not dup
            elif not torch.equal(ids_t2d, target_ids):
                probs.append(
                    (
                        "warning",
                        "d2t is not in ascending target-id order, unlike nonzero(t2d) (trainers and engines assume it is)",
                    )
                )
    return out


def vocab_check(ev: Evaluator, samples: Sequence[int]) -> Finding:
    draft = ev.draft
    cfg = draft.config
    d2t, t2d = raw_vocab_tensors(draft)
    info = analyse_vocab(d2t, t2d, cfg.draft_vocab_size, cfg.vocab_size)
    # Coverage of the samples' true tokens (loss-masked) by the draft vocab: an upper bound on
    # all-tok accuracy, since a token outside it can never be drafted.
    t2d_eff = draft.vocab.t2d.cpu()
    inside = total = 0
    for i in samples:
        try:
            s = ev.samples[i]
        except InputError:
            continue
        t = s.length
        rows = torch.arange(t - 2)
        rows = rows[s.loss_mask[rows + 1].bool()]
        true = s.input_ids[rows + 2]
        ok = (true >= 0) & (true < t2d_eff.numel())
        inside += int(t2d_eff[true[ok]].sum())
        total += int(rows.numel())
    coverage = Counts(inside, total)
    evidence = {k: v for k, v in info.items() if k != "problems"}
    evidence["problems"] = [p for _, p in info["problems"]]
    evidence["coverage"] = coverage.to_dict()
    evidence["notes"] = [n for n in draft.notes if "d2t" in n or "t2d" in n]
    errors = [p for sev, p in info["problems"] if sev == "error"]
    warnings = [p for sev, p in info["problems"] if sev == "warning"]
    cov = coverage.acc
    if errors:
        fix = (
            "rewrite d2t as offsets (d2t - arange(D)) and t2d from it; --write-fixed OUT does this"
            if info["d2t"] == "absolute"
            else "rebuild t2d from d2t (t2d[arange(D) + d2t] = True); --write-fixed OUT does this"
            if info.get("fixable")
            else "rebuild d2t/t2d from the draft vocabulary used in training"
        )
        return Finding("vocab_map", "error", "vocab map: " + "; ".join(errors), evidence, fix)
    if warnings:
        return Finding(
            "vocab_map",
            "warning",
            "vocab map: " + "; ".join(warnings),
            evidence,
            "sort the draft vocab by target id",
        )
    if cov is not None and cov < 0.7:
        return Finding(
            "vocab_map",
            "warning",
            f"the draft vocab covers only {_pct(cov)} of the samples' true tokens ({coverage.hits}/{coverage.total}): "
            "all-tok accuracy cannot exceed that",
            evidence,
            "choose the draft vocab from the serving distribution's most frequent tokens, or enlarge it",
        )
    return Finding(
        "vocab_map",
        "info",
        f"vocab map consistent ({info['d2t']} d2t, D={cfg.draft_vocab_size} of V={cfg.vocab_size}); "
        f"covers {_pct(cov)} of the samples' true tokens",
        evidence,
        "",
    )


# --- alignment ---------------------------------------------------------------------------------
def alignment_check(
    ev: Evaluator,
    samples: Sequence[int],
    wirings: Sequence[tuple[int, ...]],
    infos: Sequence[SlotInfo],
    progress: Progress | None = None,
) -> tuple[Finding, int]:
    """Re-pair hidden states and tokens one position off; returns the finding and the pairing shift
    the rest of the doctor should use (0 unless a shift is clearly better)."""
    wirings = list(dict.fromkeys(tuple(w) for w in wirings))
    hits: dict[tuple[int, tuple[int, ...]], list[np.ndarray]] = {}
    shifts = (0, -1, 1)
    scorers = {s: Scorer(ev, shift=s, count_from=1) for s in shifts}
    for n, i in enumerate(samples):  # sample-major: the sample's fc projections stay cached
        try:
            res = {s: sc.score(i, wirings) for s, sc in scorers.items()}
        except InputError:
            continue
        for s, rs in res.items():
            for w, r in zip(wirings, rs, strict=True):
                hits.setdefault((s, w), []).append(r.hit)
        if progress is not None:
            progress("alignment", n + 1, len(samples))
    arr = {k: np.concatenate(v) if v else np.zeros(0, bool) for k, v in hits.items()}

    def best_for(s: int) -> tuple[tuple[int, ...], np.ndarray]:
        w = max(wirings, key=lambda w: int(arr.get((s, w), np.zeros(0, bool)).sum()))
        return w, arr.get((s, w), np.zeros(0, bool))

    w0, h0 = best_for(0)
    table = {
        str(s): {
            wiring_label(w, infos): counts_dict(arr.get((s, w), np.zeros(0, bool))) for w in wirings
        }
        for s in shifts
    }
    evidence = {"by_shift": table, "wirings": [list(w) for w in wirings]}
    best_shift, best_w, best_h = 0, w0, h0
    for s in (-1, 1):
        w, h = best_for(s)
        if clearly_better(h, best_h, z=Z_CLEAR, margin=MARGIN_CLEAR):
            best_shift, best_w, best_h = s, w, h
    if best_shift == 0:
        alt = max((-1, 1), key=lambda s: best_for(s)[1].sum())
        return (
            Finding(
                "alignment",
                "info",
                f"hidden states and tokens pair as trained: standard pairing {_pct(h0.mean() if h0.size else None)}, "
                f"shifted by {alt:+d} {_pct(best_for(alt)[1].mean() if best_for(alt)[1].size else None)}",
                evidence,
                "",
            ),
            0,
        )
    gain = float(best_h.mean() - h0.mean())
    if best_shift == 1:
        what = "each stored hidden state belongs one position earlier (the states lag the tokens by one)"
    else:
        what = "each stored hidden state belongs one position later (the states lead the tokens by one)"
    evidence.update(
        {
            "shift": best_shift,
            "standard": counts_dict(h0),
            "shifted": counts_dict(best_h),
            "shifted_wiring": list(best_w),
            "z": paired_hits_z(best_h, h0),
        }
    )
    return (
        Finding(
            "alignment",
            _severity_for_gain(gain),
            f"samples are paired one position off: re-pairing hidden states with tokens shifted by {best_shift:+d} "
            f"scores {_pct(best_h.mean())} vs {_pct(h0.mean())} as stored; {what}. "
            "The other findings use the shifted pairing",
            evidence,
            "fix the capture / data generation so that the hidden state at position t comes from tokens "
            "x_0..x_t (research/formats.md §2.1), regenerate the samples, and retrain if the draft was trained on them",
        ),
        best_shift,
    )


# --- fc fingerprint ------------------------------------------------------------------------------
def fc_fingerprint(
    ev: Evaluator,
    samples: Sequence[int],
    best: tuple[int, ...],
    named: dict[str, tuple[int, ...]],
    infos: Sequence[SlotInfo],
    *,
    corroborates: bool = True,
) -> Finding:
    """Norm of each fc block and of its output for every slot; flags blocks that a named wiring
    feeds a slot whose projected norm is far from the best wiring's (no labels needed).

    A warning when the configured wiring is flagged and `corroborates` (the accuracy says the
    configured wiring is wrong too); info otherwise."""
    per = []
    slot_norm = []
    for i in samples:
        try:
            per.append(ev.slot_projection_norms(i))
            s = ev.samples[i]
            m = s.loss_mask.bool()
            slot_norm.append(
                [
                    float(t.float().norm(dim=-1)[m].mean())
                    if bool(m.any())
                    else float(t.float().norm(dim=-1).mean())
                    for t in s.slots
                ]
            )
        except InputError:
            continue
    if not per:
        return Finding("fc_fingerprint", "info", "fc fingerprint: no readable sample", {}, "")
    proj = np.mean(per, axis=0)  # [N, S]
    block_norms = ev.draft.fc_block_norms()
    flagged = []
    for name, w in named.items():
        if w == best:
            continue
        for b, (s, s_best) in enumerate(zip(w, best, strict=True)):
            if s == s_best:
                continue
            ratio = float(proj[b, s] / proj[b, s_best]) if proj[b, s_best] > 0 else math.inf
            if ratio > NORM_RATIO_FLAG or ratio < 1 / NORM_RATIO_FLAG:
                flagged.append(
                    {
                        "wiring": name,
                        "block": b,
                        "slot": infos[s].label if s < len(infos) else f"s{s}",
                        "norm": round(float(proj[b, s]), 3),
                        "best_slot": infos[s_best].label if s_best < len(infos) else f"s{s_best}",
                        "best_norm": round(float(proj[b, s_best]), 3),
                        "ratio": round(ratio, 3),
                    }
                )
    evidence = {
        "block_weight_norms": [round(x, 4) for x in block_norms],
        "slot_norms": [round(x, 3) for x in np.mean(slot_norm, axis=0).tolist()],
        "projected_norms": [[round(float(x), 3) for x in row] for row in proj],
        "slots": [s.label for s in infos],
        "best_wiring": list(best),
        "best_projected": [round(float(proj[b, s]), 3) for b, s in enumerate(best)],
        "flagged": flagged,
    }
    if not flagged:
        return Finding(
            "fc_fingerprint",
            "info",
            "fc fingerprint: block norms "
            + ", ".join(f"{x:.3g}" for x in block_norms)
            + f"; the best wiring {wiring_label(best, infos)} gives projected norms "
            + ", ".join(f"{proj[b, s]:.3g}" for b, s in enumerate(best)),
            evidence,
            "",
        )
    names = sorted({f["wiring"] for f in flagged})
    worst = max(flagged, key=lambda f: abs(math.log(f["ratio"])) if f["ratio"] > 0 else math.inf)
    severity = "warning" if "configured" in names and corroborates else "info"
    return Finding(
        "fc_fingerprint",
        severity,
        f"fc fingerprint: the {_join(names)} wiring{'s' if len(names) > 1 else ''} feed{'' if len(names) > 1 else 's'} "
        f"{len(flagged)} fc block(s) a slot the block was "
        f"not trained on, e.g. block {worst['block']} gets {worst['slot']} (projected norm {worst['norm']:.3g}) where "
        f"the best wiring gives {worst['best_slot']} ({worst['best_norm']:.3g}, x{worst['ratio']:.2g})",
        evidence,
        "feed each block the slot of the best wiring (see the wiring finding)",
        wiring=best,
    )


# --- config alternatives (norm_before_residual, rope, head_dim) -----------------------------------
def target_rope(ev: Evaluator, target_config: str | Path | None = None) -> RopeConfig | None:
    """The target's RoPE settings from its config.json (via --target), if known."""
    path = Path(target_config) if target_config else None
    if path is None and ev.target_head is not None and ev.target_head.path:
        path = Path(ev.target_head.path)
    if path is None:
        return None
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        return None
    try:
        cfg = read_json(path)
    except InputError:
        return None
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    from inspector.formats.checkpoint import rope_config

    return rope_config(text, cfg)


def _alternatives(draft: Draft, trope: RopeConfig | None) -> list[tuple[str, str, Draft, dict]]:
    """(kind, label, alternative draft, config fix) for every alternative a trainer may have used."""
    cfg = draft.config
    rope = cfg.rope
    out: list[tuple[str, str, Draft, dict]] = []

    def alt(**changes) -> Draft:
        return replace(draft, config=replace(cfg, **changes))

    nbr = not cfg.norm_before_residual
    out.append(
        (
            "norm_before_residual",
            f"norm_before_residual={str(nbr).lower()}",
            alt(norm_before_residual=nbr),
            {"norm_before_residual": nbr},
        )
    )
    thetas: list[tuple[str, float]] = []
    if trope is not None and not math.isclose(trope.theta, rope.theta):
        thetas.append(("target", trope.theta))
    if not math.isclose(rope.theta, 10000.0) and all(
        not math.isclose(t, 10000.0) for _, t in thetas
    ):
        thetas.append(("default", 10000.0))
    for who, theta in thetas:
        out.append(
            (
                "rope",
                f"rope_theta={theta:g} ({who})",
                alt(rope=replace(rope, theta=theta)),
                {"rope_theta": theta},
            )
        )
    if rope.rope_type not in ("default", None):
        out.append(
            (
                "rope",
                f"no rope scaling (theta {rope.theta:g})",
                alt(rope=RopeConfig(theta=rope.theta)),
                {"rope_scaling": None},
            )
        )
    if (
        trope is not None
        and trope.rope_type not in ("default", None)
        and (trope.rope_type, trope.scaling) != (rope.rope_type, rope.scaling)
    ):
        out.append(
            (
                "rope",
                f"the target's rope ({trope.rope_type}, theta {trope.theta:g})",
                alt(rope=trope),
                {
                    "rope_theta": trope.theta,
                    "rope_scaling": {"rope_type": trope.rope_type, **trope.scaling},
                },
            )
        )
    hd = cfg.head_dim
    for label, d in (
        ("hidden_size/heads", cfg.hidden_size // cfg.num_heads),
        ("2*hidden_size/heads", 2 * cfg.hidden_size // cfg.num_heads),
    ):
        if d != hd and d > 0 and d % 2 == 0 and d != (rope.dim or hd):
            fix = (
                {"rope_theta": rope.theta ** (hd / d)}
                if rope.rope_type in ("default", "linear", None)
                else {}
            )
            out.append(
                (
                    "head_dim",
                    f"RoPE over {d} dims ({label})",
                    alt(rope=replace(rope, dim=d)),
                    {**fix, "_rope_dim": d},
                )
            )
    return out


def config_checks(
    ev: Evaluator,
    samples: Sequence[int],
    candidates: Sequence[tuple[int, ...]],
    base_hits: dict[tuple[int, ...], np.ndarray],
    best: tuple[int, ...],
    *,
    shift: int = 0,
    target_config: str | Path | None = None,
    progress: Progress | None = None,
) -> tuple[list[Finding], Draft | None]:
    """Re-run the candidate wirings under each alternative config; a finding per kind.

    A wrong config also distorts the wiring search, so each alternative is scored with its own
    best candidate (the search's top wirings and the named ones) and compared with the best
    wiring as configured. Returns the findings and, when some alternative is clearly better, the
    draft with every winning alternative applied (the doctor then searches again under it).
    """
    draft = ev.draft
    cfg = draft.config
    trope = target_rope(ev, target_config)
    alts = _alternatives(draft, trope)
    cands = list(dict.fromkeys(tuple(w) for w in candidates))
    results: dict[str, list[tuple]] = {"norm_before_residual": [], "rope": [], "head_dim": []}
    scorers = [Scorer(ev, draft=alt[2], shift=shift) for alt in alts]
    parts: list[dict[tuple[int, ...], list[np.ndarray]]] = [{w: [] for w in cands} for _ in alts]
    for n, i in enumerate(samples):  # sample-major: the sample's fc projections stay cached
        try:
            scores = [sc.score(i, cands) for sc in scorers]
        except InputError:
            continue
        for a, sc_list in enumerate(scores):
            for w, r in zip(cands, sc_list, strict=True):
                parts[a][w].append(r.hit)
        if progress is not None:
            progress("config alternatives", n + 1, len(samples))
    for (kind, label, alt_draft, fix), part in zip(alts, parts, strict=True):
        hits = {w: np.concatenate(v) if v else np.zeros(0, bool) for w, v in part.items()}
        w_best = max(cands, key=lambda w: int(hits[w].sum()))
        results[kind].append((label, hits[w_best], fix, w_best, alt_draft))
    bh = base_hits[tuple(best)]
    findings: list[Finding] = []
    corrected = draft
    changed = False
    scale = _residual_scale(ev, samples, best)
    for kind in ("norm_before_residual", "rope", "head_dim"):
        finding, winner = _config_finding(kind, cfg, counts_of(bh), bh, results[kind], trope)
        if kind == "norm_before_residual" and scale is not None:
            finding.evidence.update(scale)
            ratio = scale["hidden_norm_weight_rms"] / max(scale["fc_output_rms"], 1e-12)
            if winner is None and 0.8 <= ratio <= 1.25:
                finding.summary += (
                    f"; the fc output's RMS is {scale['fc_output_rms']:.3g} and hidden_norm's weight "
                    f"{scale['hidden_norm_weight_rms']:.3g}, so the normed and the raw residual nearly "
                    "coincide: the flag barely matters for this draft"
                )
        findings.append(finding)
        if winner is not None:
            c = winner.config
            if kind == "norm_before_residual":
                corrected = replace(
                    corrected,
                    config=replace(corrected.config, norm_before_residual=c.norm_before_residual),
                )
            elif (
                corrected.config.rope == cfg.rope
            ):  # rope and head_dim both change the rope: first wins
                corrected = replace(corrected, config=replace(corrected.config, rope=c.rope))
            changed = True
    return findings, (corrected if changed else None)


def _residual_scale(ev: Evaluator, samples: Sequence[int], best: tuple[int, ...]) -> dict | None:
    """RMS of the fc output (masked rows of the first sample) and of hidden_norm's weight: when
    their ratio is ~1, hidden_norm(h) ~ h and norm_before_residual changes little."""
    from inspector.wiring import Wiring

    for i in samples:
        try:
            h = ev.fc_output(i, Wiring(tuple(best))).float()
            m = ev.samples[i].loss_mask.bool().to(h.device)
        except InputError:
            continue
        rows = h[m] if bool(m.any()) else h
        w = ev.draft.weights["layers.0.hidden_norm.weight"].float()
        return {
            "fc_output_rms": round(float(rows.pow(2).mean(-1).sqrt().mean()), 4),
            "hidden_norm_weight_rms": round(float(w.pow(2).mean().sqrt()), 4),
        }
    return None


def _config_finding(
    kind, cfg, base: Counts, base_hits, alts, trope
) -> tuple[Finding, Draft | None]:
    evidence: dict = {
        "configured": base.to_dict(),
        "alternatives": {
            label: {**counts_dict(h), "wiring": list(w)} for label, h, _, w, _ in alts
        },
    }
    winner = None
    for alt in alts:
        h = alt[1]
        if h.size == base_hits.size and clearly_better(
            h, base_hits, z=Z_CLEAR, margin=MARGIN_CLEAR
        ):
            if winner is None or h.sum() > winner[1].sum():
                winner = alt
    hd_static = None
    if kind == "head_dim":
        evidence.update(
            {
                "head_dim": cfg.head_dim,
                "explicit": cfg.head_dim_explicit,
                "hidden_size/heads": cfg.hidden_size // cfg.num_heads,
                "2*hidden_size/heads": 2 * cfg.hidden_size // cfg.num_heads,
            }
        )
        if not cfg.head_dim_explicit and cfg.head_dim != cfg.hidden_size // cfg.num_heads:
            hd_static = (
                f"config.json has no head_dim, and q_proj implies {cfg.head_dim} while hidden_size/heads is "
                f"{cfg.hidden_size // cfg.num_heads}: engines and trainers that fall back to hidden_size/heads "
                "fail to load the draft or build the wrong attention/RoPE"
            )
    if kind == "rope":
        evidence.update(
            {"theta": cfg.rope.theta, "rope_type": cfg.rope.rope_type, "scaling": cfg.rope.scaling}
        )
        if trope is not None:
            evidence["target"] = {
                "theta": trope.theta,
                "rope_type": trope.rope_type,
                "scaling": trope.scaling,
            }
    if winner is not None:
        label, h, fix, _, alt_draft = winner
        gain = float(h.mean() - base_hits.mean())
        evidence["best_alternative"] = label
        evidence["gain"] = round(gain, 4)
        evidence["z"] = round(paired_hits_z(h, base_hits), 2)
        evidence["config_fix"] = {k: v for k, v in fix.items() if not k.startswith("_")}
        alt_c = counts_of(h)
        sev = "error" if hd_static else _severity_for_gain(gain)
        if kind == "norm_before_residual":
            val = str(fix["norm_before_residual"]).lower()
            summary = (
                f"norm_before_residual: the draft scores {alt_c.fmt()} with {val} vs {base.fmt()} as configured "
                f"({str(cfg.norm_before_residual).lower()}): it was trained with {val}"
            )
            fix_text = f'set "norm_before_residual": {val} in config.json'
            if fix["norm_before_residual"]:
                fix_text += (
                    "; vLLM honours the key, while SGLang's llama_eagle3 (no such branch in the indexed version) "
                    "always uses the raw residual"
                )
        elif kind == "rope":
            summary = f"rope: {label} scores {alt_c.fmt()} vs {base.fmt()} with the configured rope (theta {cfg.rope.theta:g}, {cfg.rope.rope_type})"
            fix_text = (
                "set "
                + ", ".join(f'"{k}": {v!r}' for k, v in evidence["config_fix"].items())
                + " in the draft's config.json (transformer_layer_config for speculators)"
            )
        else:
            d = fix["_rope_dim"]
            summary = (
                f"head_dim/RoPE: the draft was trained with RoPE over {d} dims ({label}: {alt_c.fmt()}) rather than "
                f"head_dim {cfg.head_dim} ({base.fmt()}): the doubled-hidden-size trap of speculators + transformers"
            )
            if hd_static:
                summary = hd_static + "; " + summary
            fix_text = (
                f'engines rotate over head_dim {cfg.head_dim}; setting "rope_theta": {fix["rope_theta"]:.6g} '
                f"(= theta^(head_dim/{d})) gives the same frequencies; retrain with an explicit head_dim to remove it"
                if "rope_theta" in fix
                else f"retrain with an explicit head_dim {cfg.head_dim} (the scaled rope has no exact theta equivalent)"
            )
            if hd_static:
                fix_text = f'add "head_dim": {cfg.head_dim} to config.json; ' + fix_text
                evidence["config_fix"]["head_dim"] = cfg.head_dim
        return Finding(kind, sev, summary, evidence, fix_text), alt_draft
    if hd_static:
        evidence["config_fix"] = {"head_dim": cfg.head_dim}
        return Finding(
            "head_dim",
            "error",
            hd_static,
            evidence,
            f'add "head_dim": {cfg.head_dim} to config.json (transformer_layer_config for speculators)',
        ), None
    tried = ", ".join(f"{a[0]} {counts_of(a[1]).fmt()}" for a in alts) or "no alternative applies"
    if kind == "norm_before_residual":
        val = str(cfg.norm_before_residual).lower()
        summary = f"norm_before_residual={val} fits: {base.fmt()} (tried {tried})"
        if cfg.norm_before_residual:
            summary += (
                "; note SGLang's llama_eagle3 ignores the key (raw residual): serve with vLLM"
            )
    elif kind == "rope":
        summary = f"rope as configured (theta {cfg.rope.theta:g}, {cfg.rope.rope_type}) fits: {base.fmt()} (tried {tried})"
    else:
        summary = f"head_dim {cfg.head_dim} fits: {base.fmt()} (tried {tried})"
    return Finding(kind, "info", summary, evidence, ""), None
