"""`--write-fixed OUT`: a new checkpoint that an engine's ascending capture order serves correctly.

fc(cat(s_0..s_{N-1})) = sum_b W_b s_{w_b}. An engine feeds the captured layers in ascending order,
so block k receives the k-th lowest slot of the wiring; moving column block W_b to the position of
its slot in that order computes the same function. The same permutation applies to the per-block
fc norms (`fc_norm.{i}`) and to the blocks of `input_norm` (norm_before_fc: the RMS statistic
is order-free). The writer also applies the fixes the findings name for d2t/t2d and for config
keys (norm_before_residual, rope_theta, head_dim), records the aux layer ids of the new order,
and re-evaluates the written checkpoint against the original in memory. The input folder is
never written to.

`plan_fix` computes what changes (a typed `FixPlan`) from the report alone; `write_fixed` writes
it; `verify_fixed` scores the written checkpoint against the original.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from inspector.doctor.finding import ConfigFix, Kind, Severity
from inspector.doctor.report import DoctorReport, FixPlan, FixResult, Verification
from inspector.doctor.wiring.search import Scorer
from inspector.draft import Draft, RopeConfig
from inspector.errors import InputError, setting_field
from inspector.evaluate import Evaluator
from inspector.formats.checkpoint import canonical_name, load_draft
from inspector.formats.tensorfiles import find_weight_file, read_json, read_tensors
from inspector.formats.writer import DraftFiles, check_out, side_files, write_draft
from inspector.metrics import Counts
from inspector.progress import StageProgress

CONFIG_KINDS = (Kind.NORM_BEFORE_RESIDUAL, Kind.ROPE, Kind.HEAD_DIM)


def ascending_order(wiring: Sequence[int], hf: Sequence[int | None]) -> list[int]:
    """Block order b_0, b_1, ... such that wiring[b_k] ascends by HF index (slot index if unknown)."""
    if len(hf) != len(wiring):
        raise ValueError(f"{len(hf)} HF indices for {len(wiring)} fc blocks")
    keys = list(wiring) if None in hf else list(hf)
    return sorted(range(len(wiring)), key=lambda b: (keys[b], wiring[b]))


def config_fixes(report: DoctorReport) -> ConfigFix:
    """The config keys the error/warning findings ask to change (later findings win a key)."""
    out = ConfigFix()
    for f in report.findings:
        if f.kind in CONFIG_KINDS and f.is_problem and f.config_fix is not None:
            out = out.merged(f.config_fix)
    return out


def plan_fix(report: DoctorReport) -> FixPlan:
    """What `write_fixed` changes: the block permutation that makes the recommended wiring
    ascending, the config keys the findings name, and the vocab repair (errors only)."""
    best = report.serve_wiring
    hf = [report.slots[s].hf_index if s < len(report.slots) else None for s in best]
    order = ascending_order(best, hf)
    known = [h for h in hf if h is not None]
    if report.serving_config is not None and report.serving_config.undecided:
        known = []  # the slots' HF indices are a guess: write no engine ids from them
    vocab = report.finding(Kind.VOCAB_MAP)
    repair = vocab.vocab_repair if vocab is not None and vocab.severity is Severity.ERROR else None
    return FixPlan(
        wiring=best,
        block_order=tuple(order),
        fixed_wiring=tuple(best[b] for b in order),
        hf_indices=tuple(sorted(known)) if len(known) == len(hf) else None,
        config_fix=config_fixes(report),
        vocab_repair=repair,
    )


def apply_config_fixes(draft: Draft, fixes: ConfigFix) -> Draft:
    """The in-memory draft as it runs once `fixes` are written to its config."""
    cfg = draft.config
    rope = cfg.rope
    if fixes.norm_before_residual is not None:
        cfg = replace(cfg, norm_before_residual=fixes.norm_before_residual)
    if fixes.drop_rope_scaling:
        rope = RopeConfig(theta=rope.theta, dim=rope.dim)
    elif fixes.rope_scaling is not None:
        sc = fixes.rope_scaling
        rope = RopeConfig(
            theta=rope.theta,
            rope_type=sc.get("rope_type", sc.get("type", "default")),
            scaling={k: v for k, v in sc.items() if k not in ("rope_type", "type")},
            dim=rope.dim,
        )
    if fixes.rope_theta is not None:
        # The head_dim finding's theta reproduces a rope over another dimension: drop that dim.
        rope = replace(rope, theta=float(fixes.rope_theta), dim=None)
    return replace(draft, config=replace(cfg, rope=rope))


def _write_config(config: dict, layout: str, fixes: dict, hf_sorted: list[int] | None) -> list[str]:
    changes: list[str] = []
    layer = config["transformer_layer_config"] if layout == "speculators" else config
    if "norm_before_residual" in fixes:
        config["norm_before_residual"] = bool(fixes["norm_before_residual"])
        changes.append(f"norm_before_residual = {str(fixes['norm_before_residual']).lower()}")
    if "head_dim" in fixes:
        layer["head_dim"] = int(fixes["head_dim"])
        changes.append(f"head_dim = {fixes['head_dim']}")
    params = (
        layer.get("rope_parameters") if isinstance(layer.get("rope_parameters"), dict) else None
    )
    if "rope_scaling" in fixes:
        sc = fixes["rope_scaling"]
        layer.pop("rope_scaling", None)
        config.pop("rope_scaling", None)
        if params is not None:
            theta = params.get("rope_theta", layer.get("rope_theta"))
            params.clear()
            params.update(
                {"rope_theta": theta, "rope_type": "default"}
                if sc is None
                else {"rope_theta": theta, **sc}
            )
        elif sc is not None:
            layer["rope_scaling"] = dict(sc)
        changes.append(f"rope_scaling = {sc}")
    if "rope_theta" in fixes:
        theta = float(fixes["rope_theta"])
        if params is not None:
            params["rope_theta"] = theta
        else:
            layer["rope_theta"] = theta
        changes.append(f"rope_theta = {theta:.6g}")
    if hf_sorted is not None:
        eagle = config.get("eagle_config")
        if layout == "speculators" or "eagle_aux_hidden_state_layer_ids" in config:
            if config.get("eagle_aux_hidden_state_layer_ids") != hf_sorted:
                changes.append(f"eagle_aux_hidden_state_layer_ids = {hf_sorted}")
            config["eagle_aux_hidden_state_layer_ids"] = hf_sorted
        if isinstance(eagle, dict) or layout != "speculators":
            eagle = dict(eagle) if isinstance(eagle, dict) else {}
            sg = [
                k - 1 for k in hf_sorted
            ]  # SGLang explicit ids (the loader's "sglang" convention)
            if eagle.get("eagle_aux_hidden_state_layer_ids") != sg:
                changes.append(f"eagle_config.eagle_aux_hidden_state_layer_ids = {sg}")
            eagle["eagle_aux_hidden_state_layer_ids"] = sg
            eagle.setdefault("use_aux_hidden_state", True)
            config["eagle_config"] = eagle
    return changes


def write_fixed(
    ev: Evaluator,
    report: DoctorReport,
    out: str | Path,
    *,
    embed: str | Path | None = None,
    target: str | Path | None = None,
    read: Sequence[str | Path] = (),
    progress: StageProgress | None = None,
) -> FixResult:
    """Write the fixed checkpoint to `out` and verify it; returns what was done (also stored in
    `report.fixed`): the plan, the changes, expected vs fixed all-tok counts, verified."""
    draft = ev.draft
    if not draft.path:
        raise InputError(
            None, setting_field("write-fixed"), "the draft was not loaded from a folder"
        )
    src = Path(draft.path)
    out = Path(out)
    # OUT may lie in none of the folders read: checked now, before the work, and when writing.
    # `read`: the paths as the user gave them (a samples root above nested sample folders).
    inputs = (src, *{Path(f).parent for f in ev.samples.files}, target, embed, *read)
    check_out(out, inputs, setting_field("write-fixed"))
    plan = plan_fix(report)
    order = list(plan.block_order)
    fixed_wiring = plan.fixed_wiring
    hf_sorted = list(plan.hf_indices) if plan.hf_indices is not None else None
    fixes = plan.config_fix.to_dict()
    fix_vocab = plan.vocab_repair is not None

    weight_file = find_weight_file(src)
    raw = read_tensors(weight_file)
    ht = draft.config.target_hidden_size
    n = draft.config.num_fc_blocks
    changes: list[str] = []
    tensors: dict[str, torch.Tensor] = {}
    # stored name by canonical one: SpecForge's aux_norm_{low,mid,high} are fc_norm.{0,1,2}
    stored = {canonical_name(name): name for name in raw}
    for name, t in raw.items():
        canon = canonical_name(name)
        m = re.fullmatch(r"fc_norm\.(\d+)\.weight", canon)
        if canon == "fc.weight":
            t = torch.cat([t[:, b * ht : (b + 1) * ht] for b in order], dim=1)
        elif canon == "input_norm.weight" and t.numel() == n * ht:
            t = torch.cat([t[b * ht : (b + 1) * ht] for b in order])
        elif m is not None and int(m.group(1)) < n:
            k = int(m.group(1))
            t = raw[stored[f"fc_norm.{order[k]}.weight"]]
        elif canon == "d2t" and fix_vocab:
            t = draft.vocab.d2t.detach().cpu().to(t.dtype)
        elif canon == "t2d" and fix_vocab:
            t = draft.vocab.t2d.detach().cpu().to(torch.bool)
        tensors[name] = t.contiguous()
    if order != list(range(n)):
        changes.append(
            f"fc column blocks reordered {order} -> the ascending wiring {list(fixed_wiring)}"
        )
    if fix_vocab:
        changes.append("d2t rewritten as offsets, t2d rebuilt from it")

    config = read_json(src / "config.json")
    changes += _write_config(config, draft.layout, fixes, hf_sorted)
    files = DraftFiles(config=config, tensors=tensors, side_files=side_files(src))
    write_draft(files, out, inputs=inputs, field=setting_field("write-fixed"))
    if progress is not None:
        progress("write fixed", 1, 2)

    check = verify_fixed(ev, report, out, plan, embed=embed, target=target)
    if progress is not None:
        progress("write fixed", 2, 2)
    result = FixResult(
        path=str(out),
        source=str(src),
        plan=plan,
        changes=changes or ["none needed: the checkpoint is copied unchanged"],
        verification=check,
    )
    report.fixed = result
    return result


def verify_fixed(
    ev: Evaluator,
    report: DoctorReport,
    out: str | Path,
    plan: FixPlan,
    *,
    embed: str | Path | None = None,
    target: str | Path | None = None,
) -> Verification:
    """The written checkpoint under the ascending wiring vs the original (with the same config
    fixes applied in memory) under the recommended wiring, on the doctor's samples."""
    draft = ev.draft
    expected_draft = apply_config_fixes(draft, plan.config_fix)
    # A vocab fault the doctor reported but cannot repair stays in the written checkpoint: read
    # it as leniently as the doctor read the original.
    vocab = report.finding(Kind.VOCAB_MAP)
    strict = plan.vocab_repair is not None or vocab is None or vocab.severity is not Severity.ERROR
    fixed = load_draft(
        out, embed=embed, target=target, dtype=draft.dtype, device=ev.device, strict=strict
    )
    if report.plan is not None and report.plan.cuts:
        # The positions the doctor read (its compute budget), not whole samples.
        ev = ev.with_samples(ev.samples.cut(report.plan.cuts))
    fev = Evaluator(fixed, ev.samples, position_offset=ev.position_offset)
    exp_sc = Scorer(ev, draft=expected_draft, shift=report.pairing_shift)
    fix_sc = Scorer(fev, shift=report.pairing_shift)
    exp_h, fix_h, exp_p, fix_p = [], [], [], []
    for i in report.sample_indices:
        e = exp_sc.score(i, [plan.wiring])[0]
        f = fix_sc.score(i, [plan.fixed_wiring])[0]
        exp_h.append(e.hit)
        fix_h.append(f.hit)
        exp_p.append(e.pred)
        fix_p.append(f.pred)
    eh, fh = np.concatenate(exp_h), np.concatenate(fix_h)
    # Every predicted token, not only the hits: float rounding may flip a near-tie here and there.
    differ = int((np.concatenate(exp_p) != np.concatenate(fix_p)).sum())
    return Verification(
        expected=Counts(int(eh.sum()), int(eh.size)),
        fixed=Counts(int(fh.sum()), int(fh.size)),
        positions_differing=differ,
    )
