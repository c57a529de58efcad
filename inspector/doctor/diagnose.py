"""`diagnose`: run every check on a few samples and assemble the DoctorReport."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from inspector.doctor import checks, serving
from inspector.doctor.report import DoctorReport, Finding, WiringResult, sort_findings
from inspector.doctor.search import Progress, WiringSearch, paired_hits_z, search_wirings
from inspector.errors import InputError
from inspector.evaluate import Evaluator
from inspector.sample import SlotInfo
from inspector.wiring import serve_wiring, train_wiring

DEFAULT_SAMPLES = 8


def _slot_infos(ev: Evaluator, slot_layers: Sequence[int] | None) -> list[SlotInfo]:
    infos = list(ev.slot_info)
    if slot_layers is None:
        return infos
    if len(slot_layers) != len(infos):
        raise InputError(
            None,
            "--slot-layers",
            f"{len(slot_layers)} ids given, the samples have {len(infos)} slots",
        )
    return [
        replace(
            s,
            hf_index=int(k),
            label=s.label if s.hf_index == int(k) else ("embed" if int(k) == 0 else f"L{int(k)}"),
        )
        for s, k in zip(infos, slot_layers, strict=True)
    ]


def configured_wiring(
    ev: Evaluator, infos: Sequence[SlotInfo]
) -> tuple[tuple[int, ...] | None, dict]:
    """The wiring the draft's config selects on an engine (its aux layer ids, ascending), if the
    ids and the slots' HF indices are known. Also returns what was read, for the evidence."""
    cfg = ev.draft.config
    read = {
        "aux_layer_ids": list(cfg.aux_layer_ids) if cfg.aux_layer_ids else None,
        "convention": cfg.aux_layer_convention,
    }
    for hf in serving.configured_hf_ids(cfg.aux_layer_ids, cfg.aux_layer_convention):
        if len(hf) != ev.n_blocks:
            continue
        w = serving.slots_for_hf(hf, infos)
        if w is not None:
            read["hf_indices"] = sorted(hf)
            return w, read
    return None, read


def _named_wirings(
    ev: Evaluator, infos: Sequence[SlotInfo]
) -> tuple[dict[str, tuple[int, ...]], dict]:
    named: dict[str, tuple[int, ...]] = {}
    conf, read = configured_wiring(ev, infos)
    if conf is not None:
        named["configured"] = conf
    for name, fn in (("train", train_wiring), ("serve", serve_wiring)):
        try:
            named[name] = fn(infos, ev.n_blocks).slots
        except InputError:
            pass
    return named, read


def _results(
    ws: WiringSearch, infos: Sequence[SlotInfo], named: dict[str, tuple[int, ...]]
) -> list[WiringResult]:
    out = []
    for acc in ws.ranked():
        out.append(
            WiringResult(
                wiring=acc.wiring,
                label=checks.wiring_label(acc.wiring, infos),
                all_tok=acc.counts(),
                samples=len(acc.hits),
                complete=not acc.dropped,
                mean_logp=acc.mean_logp(),
                roles=[n for n, w in named.items() if w == acc.wiring],
            )
        )
    return out


def _hits(ws: WiringSearch, w: tuple[int, ...] | None) -> np.ndarray:
    acc = ws.scores(w) if w is not None else None
    return acc.arrays()[0] if acc is not None else np.zeros(0, bool)


def _wiring_finding(
    ws: WiringSearch,
    results: list[WiringResult],
    named: dict[str, tuple[int, ...]],
    infos: Sequence[SlotInfo],
    serving_cfg: dict,
    read: dict,
    shift: int,
    recommended: tuple[int, ...],
) -> Finding:
    top = results[0]
    best = next(r for r in results if r.wiring == recommended)
    others = [r for r in results if r is not best]
    second = others[0] if others else None
    bh = _hits(ws, best.wiring)
    lab = best.label
    evidence: dict = {
        "best": {"wiring": list(best.wiring), "label": lab, "all_tok": best.all_tok.to_dict()},
        "second": None,
        "named": {},
        "config": read,
        "pairing_shift": shift,
        "searched": len(results),
        "dropped_early": sum(1 for r in results if not r.complete),
    }
    if top is not best:
        evidence["top_ranked"] = {
            "wiring": list(top.wiring),
            "label": top.label,
            "all_tok": top.all_tok.to_dict(),
            "note": "not ascending and not clearly better than the recommended wiring",
        }
    if second is not None:
        evidence["second"] = {
            "wiring": list(second.wiring),
            "label": second.label,
            "all_tok": second.all_tok.to_dict(),
            "margin": _margin(best, second),
        }
    for name, w in named.items():
        r = next((x for x in results if x.wiring == w), None)
        if r is None:
            continue
        h = _hits(ws, w)
        evidence["named"][name] = {
            "wiring": list(w),
            "label": r.label,
            "all_tok": r.all_tok.to_dict(),
            "margin": _margin(best, r),
            "z": round(paired_hits_z(bh, h), 2) if h.size == bh.size else None,
        }
    margin_txt = ""
    if second is not None:
        margin_txt = f", {100 * _margin(best, second):+.1f} points over the next {second.label}"
    if top is not best:
        margin_txt += f"; the top-ranked {top.label} ({top.all_tok.fmt()}) is not clearly better and needs a permuted checkpoint"
    ref_name = "configured" if "configured" in named else None
    ascending = serving_cfg.get("ascending")
    vllm_ids = serving_cfg.get("vllm", {}).get("config", {}).get("eagle_aux_hidden_state_layer_ids")
    sg_ids = serving_cfg.get("sglang", {}).get("layer_ids_before_pr25454")
    cfg_line = ""
    if vllm_ids is not None:
        cfg_line = f"eagle_aux_hidden_state_layer_ids {vllm_ids} for vLLM, eagle_config ids {sg_ids} for SGLang (< #25454)"
    serve_txt = ""
    if "serve" in named and named["serve"] != best.wiring:
        s = evidence["named"].get("serve")
        if s:
            serve_txt = f"; an engine feeding {s['label']} gets {best_fmt(s['all_tok'])}"
    if ascending is False:
        asc = next((r for r in others if _ascending(r.wiring, infos)), None)
        if asc is not None:
            evidence["best_ascending"] = {
                "wiring": list(asc.wiring),
                "label": asc.label,
                "all_tok": asc.all_tok.to_dict(),
                "margin": _margin(best, asc),
            }
            margin_txt += f"; the best ascending order {asc.label} gets {asc.all_tok.fmt()}"
            if named.get("serve") == asc.wiring:
                serve_txt = ""  # the same wiring, already quoted
        return Finding(
            "wiring",
            "error",
            f"the draft fits {lab} best ({best.all_tok.fmt()}{margin_txt}), an order no engine can feed: engines "
            "concatenate captured layers in ascending order" + serve_txt,
            evidence,
            "write a checkpoint whose fc blocks are permuted so the ascending order computes the same function: "
            "eagle-inspect doctor CKPT SAMPLES --write-fixed OUT; then configure the engines as in serving_config",
            wiring=best.wiring,
        )
    if ref_name is not None and named[ref_name] != best.wiring:
        ref = evidence["named"][ref_name]
        h = _hits(ws, named[ref_name])
        clear = h.size == bh.size and checks.clearly_better(
            bh, h, z=checks.Z_CLEAR, margin=checks.MARGIN_CLEAR
        )
        if clear:
            return Finding(
                "wiring",
                "error",
                f"the config selects {ref['label']} ({best_fmt(ref['all_tok'])}), but the draft was trained for {lab} "
                f"({best.all_tok.fmt()}, {100 * ref['margin']:+.1f} points)" + serve_txt,
                evidence,
                ("set " + cfg_line + " in the draft's config.json")
                if cfg_line
                else "configure the engines to feed " + lab,
                wiring=best.wiring,
            )
        return Finding(
            "wiring",
            "info",
            f"the best wiring {lab} ({best.all_tok.fmt()}) is not clearly better than the configured "
            f"{ref['label']} ({best_fmt(ref['all_tok'])})" + serve_txt,
            evidence,
            "",
            wiring=best.wiring,
        )
    if ref_name is None:
        sev = "warning"
        s = evidence["named"].get("serve")
        if s is None or s["wiring"] == list(best.wiring):
            sev = "info"
        return Finding(
            "wiring",
            sev,
            f"the draft fits {lab} best ({best.all_tok.fmt()}{margin_txt}); its config names no aux layer ids, so "
            "engines feed their default layers" + serve_txt,
            evidence,
            ("set " + cfg_line + " in the draft's config.json")
            if cfg_line
            else "pass --slot-layers to get the engine ids for " + lab,
            wiring=best.wiring,
        )
    return Finding(
        "wiring",
        "info",
        f"the draft fits its configured wiring {lab} best ({best.all_tok.fmt()}{margin_txt})"
        + serve_txt,
        evidence,
        ("serve it with " + cfg_line) if cfg_line else "",
        wiring=best.wiring,
    )


def _ascending(w: Sequence[int], infos: Sequence[SlotInfo]) -> bool:
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
    if _ascending(top.wiring, infos):
        return top.wiring
    asc = next((r for r in results if r.complete and _ascending(r.wiring, infos)), None)
    if asc is None:
        return top.wiring
    th, ah = _hits(ws, top.wiring), _hits(ws, asc.wiring)
    if th.size == ah.size and checks.clearly_better(
        th, ah, z=checks.Z_CLEAR, margin=checks.MARGIN_CLEAR
    ):
        return top.wiring
    return asc.wiring


def best_fmt(d: dict) -> str:
    acc = d.get("acc")
    return f"{d['hits']}/{d['total']} " + ("-" if acc is None else f"{100 * acc:.1f}%")


def _margin(a: WiringResult, b: WiringResult) -> float:
    return round((a.all_tok.acc or 0.0) - (b.all_tok.acc or 0.0), 4)


def _serving_finding(serving_cfg: dict, best: WiringResult) -> Finding:
    problems = serving_cfg.get("problems", [])
    if serving_cfg.get("ascending") is None:
        return Finding(
            "serving_config",
            "warning",
            "serving config: " + "; ".join(problems),
            serving_cfg,
            "pass --slot-layers HF,IDS,...",
        )
    vllm = serving_cfg["vllm"]["config"]["eagle_aux_hidden_state_layer_ids"]
    sg = serving_cfg["sglang"]["layer_ids_before_pr25454"]
    sg_since = serving_cfg["sglang"]["layer_ids_since_pr25454"]
    lines = f"vLLM eagle_aux_hidden_state_layer_ids {vllm}; SGLang eagle_config.eagle_aux_hidden_state_layer_ids {sg} (< PR #25454)"
    lines += (
        f", {sg_since} (>= #25454)"
        if sg_since is not None and sg_since != sg
        else (" (same since #25454)" if sg_since == sg else ", none since #25454")
    )
    fix = f'config.json: "eagle_aux_hidden_state_layer_ids": {vllm} (vLLM) and "eagle_config": {{"eagle_aux_hidden_state_layer_ids": {sg}, "use_aux_hidden_state": true}} (SGLang)'
    if not serving_cfg["ascending"]:
        return Finding(
            "serving_config",
            "error",
            f"no engine config reproduces {best.label}: "
            + "; ".join(problems)
            + f". After --write-fixed: {lines}",
            serving_cfg,
            "eagle-inspect doctor CKPT SAMPLES --write-fixed OUT, then serve OUT with " + fix,
        )
    caveats = [
        n
        for e in ("sglang", "vllm")
        for n in serving_cfg[e]["notes"]
        if "needs" in n or "never" in n or "no id" in n
    ]
    sev = "error" if problems else ("warning" if caveats else "info")
    summary = f"to feed {best.label}: {lines}"
    if problems:
        summary += "; " + "; ".join(problems)
    elif caveats:
        summary += "; " + "; ".join(caveats)
    return Finding("serving_config", sev, summary, serving_cfg, fix, wiring=best.wiring)


def diagnose(
    ev: Evaluator,
    n_samples: int = DEFAULT_SAMPLES,
    *,
    sample_indices: Sequence[int] | None = None,
    slot_layers: Sequence[int] | None = None,
    target_config: str | Path | None = None,
    prune: bool = True,
    progress: Progress | None = None,
) -> DoctorReport:
    """Find the wiring the draft was trained for and every train/serve mismatch.

    ev: an Evaluator over the draft and samples (load the draft with `strict=False` so a faulty
      d2t or a missing head_dim become findings instead of load errors).
    n_samples: how many samples (the first ones) every check runs on; sample_indices overrides.
    slot_layers: HF index of every slot, overriding data_config.json.
    target_config: the target's config.json (or folder), for its rope settings; defaults to the
      evaluator's target head folder.
    prune: drop clearly worse wirings after the first samples (False: evaluate all on all).
    progress: called as progress(stage, done, total) per step of each stage; an exception raised
      there aborts the run.
    """
    t0 = time.perf_counter()
    seconds: dict[str, float] = {}
    if sample_indices is None:
        sample_indices = list(range(min(max(1, n_samples), len(ev.samples))))
    idx = list(sample_indices)
    infos = _slot_infos(ev, slot_layers)
    n_blocks = ev.n_blocks
    if len(infos) < n_blocks:
        raise InputError(None, "samples", f"{len(infos)} slots, but fc takes {n_blocks}")
    findings: list[Finding] = []
    named, read = _named_wirings(ev, infos)
    protected = list(dict.fromkeys(named.values()))
    findings.append(checks.vocab_check(ev, idx))

    def lap(name: str, since: float) -> float:
        now = time.perf_counter()
        seconds[name] = round(now - since, 3)
        return now

    t = time.perf_counter()
    ws = search_wirings(
        ev, idx, protected=protected, start=named.get("configured"), prune=prune, progress=progress
    )
    t = lap("search", t)
    if ws.skipped:
        findings.append(
            Finding(
                "samples",
                "warning",
                f"{len(ws.skipped)} of {len(idx)} samples could not be scored",
                {"skipped": {str(k): v for k, v in ws.skipped.items()}},
                "check those sample files",
            )
        )
    idx = [i for i in idx if i not in ws.skipped]
    if not idx:
        raise InputError(None, "samples", "no sample could be scored")
    results = _results(ws, infos, named)

    # Alignment: the best and the configured wirings, re-paired one position off.
    check_w = [results[0].wiring, *[named[n] for n in ("configured", "train") if n in named]]
    align, shift = checks.alignment_check(ev, idx, check_w[:3], infos, progress=progress)
    findings.append(align)
    if shift:
        ws = search_wirings(
            ev,
            idx,
            protected=protected,
            start=named.get("configured"),
            shift=shift,
            prune=prune,
            progress=progress,
        )
        results = _results(ws, infos, named)
    t = lap("alignment", t)

    # Config alternatives, each scored with its own best among the leading wirings; when one is
    # clearly better, the search runs again under the corrected config.
    rec0 = recommend(ws, results, infos)
    cands = [rec0, *[r.wiring for r in results if r.complete][:3], *named.values()]
    cands = [
        w for w in dict.fromkeys(cands) if ws.scores(w) is not None and not ws.scores(w).dropped
    ]
    cfg_findings, corrected = checks.config_checks(
        ev,
        idx,
        cands,
        {w: _hits(ws, w) for w in cands},
        rec0,
        shift=shift,
        target_config=target_config,
        progress=progress,
    )
    findings.extend(cfg_findings)
    if corrected is not None:
        ws = search_wirings(
            ev,
            idx,
            protected=protected,
            start=named.get("configured"),
            draft=corrected,
            shift=shift,
            prune=prune,
            progress=progress,
        )
        results = _results(ws, infos, named)
    t = lap("config", t)

    rec = recommend(ws, results, infos)
    best = next(r for r in results if r.wiring == rec)
    serving_cfg = serving.serving_config(rec, infos, n_tokens=3)
    wiring_finding = _wiring_finding(ws, results, named, infos, serving_cfg, read, shift, rec)
    if corrected is not None:
        wiring_finding.evidence["assumes_config_fixes"] = True
        wiring_finding.summary += " (scored with the config fixes the other findings name)"
    findings.append(wiring_finding)
    findings.append(
        checks.fc_fingerprint(
            ev, idx, rec, named, infos, corroborates=wiring_finding.severity == "error"
        )
    )
    t = lap("fingerprint", t)
    findings.append(_serving_finding(serving_cfg, best))
    seconds["total"] = round(time.perf_counter() - t0, 3)
    return DoctorReport(
        best_wiring=results[0].wiring,
        recommended_wiring=rec,
        wirings=results,
        findings=sort_findings(findings),
        serving_config=serving_cfg,
        slots=infos,
        sample_indices=idx,
        configured_wiring=named.get("configured"),
        pairing_shift=shift,
        checkpoint=ev.draft.path,
        seconds=seconds,
    )
