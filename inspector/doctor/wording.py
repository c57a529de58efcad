"""Every sentence the doctor shows: each finding's summary and fix, from its typed facts. The
checks decide (severity, figures, control data); this module only words them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from inspector.doctor.report import ACCEPT_STEPS, VocabRepair, WiringCase
from inspector.formatting import pct

if TYPE_CHECKING:
    from inspector.doctor.alignment import AlignmentFacts
    from inspector.doctor.config_alternatives import ConfigFacts
    from inspector.doctor.fingerprint import FingerprintFacts
    from inspector.doctor.layer_ids import LayerIdFacts, Reading
    from inspector.doctor.report import ConfigFix
    from inspector.doctor.vocab import VocabFacts, VocabProblem
    from inspector.doctor.wiring_check import WiringFacts, WiringRef
    from inspector.draft import DraftConfig

FINGERPRINT_UNREADABLE = "fc fingerprint: no readable sample"
WRITE_FIXED = "eagle-inspect doctor CKPT SAMPLES --write-fixed OUT"


class Text(NamedTuple):
    summary: str
    fix: str = ""


# --- vocab map ---------------------------------------------------------------------------------
VOCAB_PROBLEMS = {  # code -> text; n = VocabProblem.count, of = VocabProblem.of, v = vocab_size
    "t2d_without_d2t": "t2d is stored without d2t: engines need d2t to map draft ids",
    "no_d2t": "no d2t but draft_vocab_size {n} != vocab_size {of}",
    "d2t_size": "d2t has {n} entries, draft_vocab_size is {of}",
    "absolute_d2t": "d2t holds absolute target ids, not offsets: engines compute target = draft "
    "id + d2t, which leaves [0, {v}) for {n} of {of} ids",
    "absolute_d2t_in_range": "d2t holds absolute target ids, not offsets: engines compute "
    "target = draft id + d2t, which maps draft ids to the wrong tokens",
    "out_of_range": "{n} of {of} draft ids map outside the target vocab [0, {v})",
    "duplicates": "{n} draft ids map to a target id another draft id already has",
    "t2d_size": "t2d has {n} entries, vocab_size is {of}",
    "t2d_count": "t2d marks {n} tokens, draft_vocab_size is {of}",
    "t2d_disagrees": "t2d disagrees with d2t: {n} of the ids d2t maps to are not marked in t2d",
    "unsorted": "d2t is not in ascending target-id order, unlike nonzero(t2d) (trainers and "
    "engines assume it is)",
}
VOCAB_FIXES = {
    VocabRepair.OFFSETS: "rewrite d2t as offsets (d2t - arange(D)) and t2d from it; --write-fixed "
    "OUT does this",
    VocabRepair.T2D_FROM_D2T: "rebuild t2d from d2t (t2d[arange(D) + d2t] = True); --write-fixed "
    "OUT does this",
    None: "rebuild d2t/t2d from the draft vocabulary used in training",
}


def vocab_problem(p: VocabProblem, v: int) -> str:
    return VOCAB_PROBLEMS[p.code].format(n=p.count, of=p.of, v=v)


def vocab(facts: VocabFacts, severity: str) -> Text:
    a = facts.analysis
    d, v = a.draft_vocab_size, a.vocab_size
    by_sev = {
        s: [vocab_problem(p, v) for p in a.problems if p.severity == s]
        for s in ("error", "warning")
    }
    if by_sev["error"]:
        return Text("vocab map: " + "; ".join(by_sev["error"]), VOCAB_FIXES[a.repair])
    if by_sev["warning"]:
        return Text(
            "vocab map: " + "; ".join(by_sev["warning"]), "sort the draft vocab by target id"
        )
    cov = facts.coverage
    if severity == "warning":
        return Text(
            f"the draft vocab covers only {pct(cov.acc)} of the samples' true tokens "
            f"({cov.hits}/{cov.total}): all-tok accuracy cannot exceed that",
            "choose the draft vocab from the serving distribution's most frequent tokens, or "
            "enlarge it",
        )
    return Text(
        f"vocab map consistent ({a.d2t} d2t, D={d} of V={v}); covers {pct(cov.acc)} of the "
        "samples' true tokens"
    )


# --- alignment ---------------------------------------------------------------------------------
def alignment(facts: AlignmentFacts) -> Text:
    std, shifted = pct(facts.standard.acc), pct(facts.shifted.acc)
    if not facts.shift:
        return Text(
            f"hidden states and tokens pair as trained: standard pairing {std}, shifted by "
            f"{facts.other_shift:+d} {shifted}"
        )
    what = "each stored hidden state belongs one position " + (
        "earlier (the states lag the tokens by one)"
        if facts.shift == 1
        else "later (the states lead the tokens by one)"
    )
    return Text(
        f"samples are paired one position off: re-pairing hidden states with tokens shifted by "
        f"{facts.shift:+d} scores {shifted} vs {std} as stored; {what}. The other findings use the "
        "shifted pairing",
        "fix the capture / data generation so that the hidden state at position t comes from "
        "tokens x_0..x_t (row j pairs the states at j with x_{j+1} and predicts x_{j+2}), "
        "regenerate the samples, and retrain if the draft was trained on them",
    )


# --- fc fingerprint ----------------------------------------------------------------------------
def fingerprint(facts: FingerprintFacts) -> Text:
    if not facts.flagged:
        return Text(
            "fc fingerprint: block norms "
            + ", ".join(f"{x:.3g}" for x in facts.block_weight_norms)
            + f"; the best wiring {facts.best_label} gives projected norms "
            + ", ".join(f"{x:.3g}" for x in facts.best_projected)
        )
    names = facts.flagged_wirings
    many = len(names) > 1
    joined = ", ".join(names[:-1]) + " and " + names[-1] if many else names[0]
    w = facts.worst
    return Text(
        f"fc fingerprint: the {joined} wiring{'s' if many else ''} feed{'' if many else 's'} "
        f"{len(facts.flagged)} fc block(s) a slot the block was not trained on, e.g. block "
        f"{w.block} gets {w.slot} (projected norm {w.norm:.3g}) where the best wiring gives "
        f"{w.best_slot} ({w.best_norm:.3g}, x{w.ratio:.2g})",
        "feed each block the slot of the best wiring (see the wiring finding)",
    )


# --- config alternatives -----------------------------------------------------------------------
def _missing_head_dim(cfg: DraftConfig) -> str:
    return (
        f"config.json has no head_dim, and q_proj implies {cfg.head_dim} while hidden_size/heads "
        f"is {cfg.hidden_size // cfg.num_heads}: engines and trainers that fall back to "
        "hidden_size/heads fail to load the draft or build the wrong attention/RoPE"
    )


def _config_winner(facts: ConfigFacts, cfg: DraftConfig, fix: ConfigFix) -> Text:
    win = facts.winner
    assert win is not None
    alt, base = win.counts.fmt(), facts.configured.fmt()
    label = win.alternative.label
    if facts.kind == "norm_before_residual":
        val = str(fix.norm_before_residual).lower()
        read = "as configured" if cfg.norm_before_residual_explicit else "as read when absent"
        summary = (
            f"norm_before_residual: the draft scores {alt} with {val} vs {base} {read} "
            f"({str(cfg.norm_before_residual).lower()}): it was trained with {val}"
        )
        if not cfg.norm_before_residual_explicit:
            summary += "; " + residual_readers(facts)
        text = f'set "norm_before_residual": {val} in config.json'
        if fix.norm_before_residual:
            text += "; vLLM honours the key, while SGLang's llama_eagle3 has no such branch and always uses the raw residual"
        return Text(summary, text)
    if facts.kind == "rope":
        keys = ", ".join(f'"{k}": {v!r}' for k, v in win.alternative.config_fix.to_dict().items())
        return Text(
            f"rope: {label} scores {alt} vs {base} with the configured rope (theta "
            f"{cfg.rope.theta:g}, {cfg.rope.rope_type})",
            f"set {keys} in the draft's config.json (transformer_layer_config for speculators)",
        )
    d = win.alternative.rope_dim
    summary = (
        f"head_dim/RoPE: the draft was trained with RoPE over {d} dims ({label}: {alt}) rather "
        f"than head_dim {cfg.head_dim} ({base}): the doubled-hidden-size trap of speculators + "
        "transformers"
    )
    if fix.rope_theta is not None:
        text = (
            f'engines rotate over head_dim {cfg.head_dim}; setting "rope_theta": '
            f"{fix.rope_theta:.6g} (= theta^(head_dim/{d})) gives the same frequencies; retrain "
            "with an explicit head_dim to remove it"
        )
    else:
        text = f"retrain with an explicit head_dim {cfg.head_dim} (the scaled rope has no exact theta equivalent)"
    if facts.missing_head_dim:
        summary = _missing_head_dim(cfg) + "; " + summary
        text = f'add "head_dim": {cfg.head_dim} to config.json; ' + text
    return Text(summary, text)


def residual_readers(facts: ConfigFacts) -> str:
    """Who reads which norm_before_residual from a config.json that omits the key."""
    readings = facts.readings or {}
    parts = []
    for who, v in readings.items():
        why = " (no such branch: raw residual)" if who == "SGLang" else ""
        parts.append(f"{who} reads {str(v).lower()}{why}")
    return "config.json has no norm_before_residual key, and readers differ: " + ", ".join(parts)


def config_alternative(facts: ConfigFacts, cfg: DraftConfig, fix: ConfigFix) -> Text:
    if facts.winner is not None:
        return _config_winner(facts, cfg, fix)
    if facts.missing_head_dim:
        return Text(
            _missing_head_dim(cfg),
            f'add "head_dim": {cfg.head_dim} to config.json (transformer_layer_config for speculators)',
        )
    base = facts.configured.fmt()
    tried = (
        ", ".join(f"{s.alternative.label} {s.counts.fmt()}" for s in facts.scores)
        or "no alternative applies"
    )
    if facts.kind == "rope":
        return Text(
            f"rope as configured (theta {cfg.rope.theta:g}, {cfg.rope.rope_type}) fits: {base} "
            f"(tried {tried})"
        )
    if facts.kind == "head_dim":
        return Text(f"head_dim {cfg.head_dim} fits: {base} (tried {tried})")
    summary = (
        f"norm_before_residual={str(cfg.norm_before_residual).lower()} fits: {base} (tried {tried})"
    )
    if not cfg.norm_before_residual_explicit:
        summary += "; " + residual_readers(facts)
        wrong = [w for w in facts.misread_by if w != "SGLang"]
        if wrong and facts.fits is not None:
            val = str(facts.fits).lower()
            return Text(
                summary + f": {' and '.join(wrong)} will run the draft with the wrong residual",
                f'write "norm_before_residual": {val} into config.json so every reader that '
                "honours the key agrees",
            )
    if cfg.norm_before_residual:
        summary += "; note SGLang's llama_eagle3 ignores the key (raw residual): serve with vLLM"
    scale = facts.residual_scale
    if scale is not None and facts.residual_norm_inert:
        summary += (
            f"; the fc output's RMS is {scale['fc_output_rms']:.3g} and hidden_norm's weight "
            f"{scale['hidden_norm_weight_rms']:.3g}, so the normed and the raw residual nearly "
            "coincide: the flag barely matters for this draft"
        )
    return Text(summary)


# --- wiring --------------------------------------------------------------------------------------
CONVENTIONS = {
    "hf": "HF indices",
    "layer_output": "decoder-layer output ids (HF index = id + 1)",
    "sglang": "SGLang ids (HF index = id + 1 before sglang PR #25454)",
}


def _slots_source(ids: LayerIdFacts) -> str:
    s = ids.slots
    if s is None:
        return "the slots' HF indices are unknown (no data_config.json beside the samples)"
    if s.where == "--slot-layers":
        return f"the slots are HF {list(ids.slot_hf)} (--slot-layers)"
    if s.where == "the target":
        return f"the slots are HF {list(ids.slot_hf)} (measured against the target)"
    how = "assumed, since the file states no convention"
    if s.stated:
        how = f"decided by its {s.decided_by}" if s.decided_by else "as the file states"
    return (
        f"the slots are HF {list(ids.slot_hf)} ({s.where} {list(s.ids)} read as "
        f"{CONVENTIONS.get(s.convention, s.convention)}, {how})"
    )


def _reading(r: Reading, ids: LayerIdFacts) -> str:
    changed = []
    if r.rereads_slots:
        changed.append("data_config.json's ids as HF indices")
    if ids.draft is not None and r.config_hf not in ids.draft.hf:
        changed.append(f"the config's ids as {CONVENTIONS[r.draft_convention]}")
    tail = ", exactly the best wiring" if r.is_best else ""
    return f"reading {' and '.join(changed)} instead, the config selects {r.label}{tail}"


def _unmatched(facts: WiringFacts) -> str:
    ids = facts.layer_ids
    d = ids.draft
    assert d is not None
    n = len(facts.best.wiring)
    if all(len(h) != n for h in d.hf):
        return f"its {d.where} {list(d.ids)} name {len(d.ids)} layers, but fc takes {n}"
    if d.convention == "hf":
        read = "HF indices, as vLLM reads the key"
    else:
        read = f"{CONVENTIONS.get(d.convention, d.convention)}: HF " + " or ".join(
            str(list(h)) for h in d.hf
        )
    return f"its {d.where} {list(d.ids)} ({read}) match no captured slot: {_slots_source(ids)}"


def _reread_fix(ids: LayerIdFacts) -> str:
    """The override for a reading that takes data_config.json's ids as HF indices."""
    r = next((r for r in ids.best_readings if r.rereads_slots), None)
    r = r or next((r for r in ids.readings if r.rereads_slots), None)
    if r is None:
        return ""
    flag = ""
    if all(k is not None for k in r.slot_hf):
        flag = f"pass --slot-layers {','.join(str(k) for k in r.slot_hf)} (doctor, eval, open) or "
    return (
        "if data_config.json holds HF indices (sets captured with vLLM-convention ids do), "
        f'{flag}add "index_convention": "hf" to its hidden_states'
    )


CAPTURE_ENGINE = "eagle-inspect capture TARGET PROMPTS --out DIR --draft CKPT --engine {}"


def _accept_versus(served: WiringRef, best: WiringRef) -> str:
    """' and logs accept len 1.30 instead of 2.73 at 3 steps' (the replayed chain), or ''."""
    if served.accept_length is None or best.accept_length is None:
        return ""
    return f" and logs accept len {_al(served)} instead of {_al(best)} at {ACCEPT_STEPS} steps"


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
            ": vLLM and SGLang (before and since #25454) feed HF [2, L//2, L-3] of an L-layer "
            "target, and the layer count is unknown here (pass --target, or state "
            "num_hidden_layers in data_config.json)"
        )
    parts = []
    default = facts.named.get("engine default")
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
                ) + _accept_versus(default, facts.best)
        elif feed.missing:
            engine = feed.engine_keys[0]
            text += (
                f"; the samples lack HF {list(feed.missing)}, which "
                f"`{CAPTURE_ENGINE.format(engine)}` captures"
            )
        parts.append(text)
    return ": " + "; ".join(parts)


def _wiring_fix(facts: WiringFacts, cfg_line: str) -> str:
    case, lab = facts.case, facts.best.label
    if case == WiringCase.NOT_ASCENDING:
        return (
            "write a checkpoint whose fc blocks are permuted so the ascending order computes the "
            f"same function: {WRITE_FIXED}; then configure the engines as in serving_config"
        )
    set_line = f"set {cfg_line} in the draft's config.json" if cfg_line else ""
    reread = _reread_fix(facts.layer_ids)
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


def wiring(facts: WiringFacts) -> Text:
    best, second, case = facts.best, facts.second, facts.case
    lab, bfmt = best.label, best.all_tok.fmt()
    margin = ""
    if second is not None:
        margin = f", {100 * (second.margin or 0.0):+.1f} points over the next {second.label}"
    if facts.top_ranked is not None:
        top = facts.top_ranked
        margin += f"; the top-ranked {top.label} ({top.all_tok.fmt()}) is not clearly better and needs a permuted checkpoint"
    serve = facts.named.get("serve")
    asc = facts.best_ascending
    serve_txt = ""
    default = facts.named.get("engine default")
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
            serve_txt += _accept_versus(serve, best)
    if not serve_txt and best.accept_length is not None:
        serve_txt = f"; served so, an engine logs accept len {_al(best)} at {ACCEPT_STEPS} steps"
    cfg_line = ""
    if facts.engine_ids is not None:
        vllm, sg = facts.engine_ids
        cfg_line = f"eagle_aux_hidden_state_layer_ids {vllm} for vLLM, eagle_config ids {sg} for SGLang (< #25454)"
    readings = "".join("; " + _reading(r, facts.layer_ids) for r in facts.layer_ids.readings)
    ref = facts.named.get("configured")
    if case == WiringCase.NOT_ASCENDING:
        if asc is not None:
            margin += f"; the best ascending order {asc.label} gets {asc.all_tok.fmt()}"
        summary = (
            f"the draft fits {lab} best ({bfmt}{margin}), an order no engine can feed: engines "
            "concatenate captured layers in ascending order"
        )
    elif case == WiringCase.CONFIG_WRONG and ref is not None:
        summary = (
            f"the config selects {ref.label} ({ref.all_tok.fmt()}), but the draft was trained for "
            f"{lab} ({bfmt}, {100 * (ref.margin or 0.0):+.1f} points){readings}"
        )
    elif case == WiringCase.CONFIG_CLOSE and ref is not None:
        summary = (
            f"the best wiring {lab} ({bfmt}) is not clearly better than the configured "
            f"{ref.label} ({ref.all_tok.fmt()}){readings}"
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


# --- serving config ------------------------------------------------------------------------------
def serving(cfg: dict, best_label: str, caveats: Sequence[str], slots_reread: bool) -> Text:
    problems = cfg.get("problems", [])
    if cfg.get("undecided"):
        return Text(
            "serving config: no engine ids: " + "; ".join(problems),
            "decide the slots' identity first (see the slot_identity finding): pass --target DIR, "
            "state the convention in data_config.json, or pass --slot-layers",
        )
    if cfg.get("ascending") is None:
        return Text("serving config: " + "; ".join(problems), "pass --slot-layers HF,IDS,...")
    vllm = cfg["vllm"]["config"]["eagle_aux_hidden_state_layer_ids"]
    sg = cfg["sglang"]["layer_ids_before_pr25454"]
    since = cfg["sglang"]["layer_ids_since_pr25454"]
    lines = (
        f"vLLM eagle_aux_hidden_state_layer_ids {vllm}; SGLang "
        f"eagle_config.eagle_aux_hidden_state_layer_ids {sg} (< PR #25454)"
    )
    if since is not None and since != sg:
        lines += f", {since} (>= #25454)"
    else:
        lines += " (same since #25454)" if since == sg else ", none since #25454"
    keys = (
        f'config.json: "eagle_aux_hidden_state_layer_ids": {vllm} (vLLM) and "eagle_config": '
        f'{{"eagle_aux_hidden_state_layer_ids": {sg}, "use_aux_hidden_state": true}} (SGLang)'
    )
    if not cfg["ascending"]:
        return Text(
            f"no engine config reproduces {best_label}: "
            + "; ".join(problems)
            + f". After --write-fixed: {lines}",
            f"{WRITE_FIXED}, then serve OUT with {keys}",
        )
    summary = f"to feed {best_label}: {lines}"
    if problems or caveats:
        summary += "; " + "; ".join(problems or caveats)
    if slots_reread:
        summary += (
            "; these ids take data_config.json's layer ids as decoder-layer outputs (see the "
            "wiring finding for the other reading)"
        )
    return Text(summary, keys)


def samples_skipped(skipped: dict[int, str], searched: int) -> Text:
    """Names every sample that could not be scored (its file, field and reason), up to five."""
    shown = [f"#{i} {why}" for i, why in sorted(skipped.items())[:5]]
    more = f"; and {len(skipped) - 5} more" if len(skipped) > 5 else ""
    return Text(
        f"{len(skipped)} of {searched} samples could not be scored: " + "; ".join(shown) + more,
        "fix or remove those sample files",
    )


# --- slot identity -------------------------------------------------------------------------------
READING_NAMES = {
    "hf": "HF indices",
    "layer_output": "decoder-layer output ids (the speculators v1 default, HF index = id + 1)",
}


def _state(k: int | str | None) -> str:
    if k is None:
        return "no state of this target"
    return "the post-norm final state" if k == "post-norm" else f"HF {k}"


def _mismatch(m, n_layers: int | None) -> Text:
    stored = f"slot {m.slot} is stored as {_state(m.claimed)}"
    if m.verifier:
        stored += " (the verifier's last state, the teacher's source)"
    if m.actual is None:
        return Text(
            f"{stored} but equals {_state(None)}: captured from another layer convention, another "
            "model revision, or a quantized or rotated target",
            "capture the samples from the deployed target (eagle-inspect capture), or pass the "
            "target the samples were captured from",
        )
    fix = f"recapture slot {m.slot} from {_state(m.claimed)}"
    if m.verifier and n_layers is not None and m.claimed == n_layers:
        fix += (
            f" (the last layer's output before the final norm: vLLM id {n_layers}, not "
            f"{n_layers - 1}; the off-by-one of TorchSpec#87)"
        )
    return Text(f"{stored} but equals {_state(m.actual)}", fix)


def _names(hf) -> str:
    """[1, 3, 5, post-norm]: a slot without an HF index is the post-norm final state."""
    return "[" + ", ".join("post-norm" if k is None else str(k) for k in hf) + "]"


def slot_identity(identity) -> Text:
    """The slots' identity: measured, decided by the files, or two readings and no decision."""
    from inspector.doctor.target_slots import describe

    measured = identity.measured
    src = identity.source or "the samples"
    if identity.mismatches:
        parts = [_mismatch(m, identity.num_layers) for m in identity.mismatches]
        summary = (
            f"the target contradicts {src}: "
            + "; ".join(p.summary for p in parts)
            + ". Every score on this slot is of another state than the file names"
        )
        return Text(summary, "; ".join(dict.fromkeys(p.fix for p in parts)))
    hf = [("post-norm" if k is None else k) for k in identity.hf]
    if identity.decided_by == "the target":
        matches = ", ".join(describe(m) for m in measured.matches)
        agrees = f"{src} as read agrees"
        if identity.settled is not None:
            agrees = f"so {src} holds {READING_NAMES[identity.settled].split(' (')[0]}"
        return Text(
            f"slots measured against the target ({identity.num_layers} layers, samples "
            f"{list(measured.samples)}): {matches}; {agrees}"
        )
    tail = ""
    if measured is not None and measured.skipped:
        tail = f"; the target was not run ({measured.skipped})"
    notes = "".join("; " + n for n in identity.notes)
    if identity.decided:
        r = identity.file_reading
        how = identity.decided_by
        if r is not None and how == "layer count":
            how = f"the layer count ({r.num_layers} layers, {r.layers_from})"
        elif how not in ("--slot-layers",):
            how = f"its {how}"
        return Text(f"the slots are HF {hf}: {src}, decided by {how}{notes}{tail}")
    r = identity.file_reading
    assert r is not None
    if len(identity.readings) == 1:  # the ids fit the slots in the reader's reading only
        return Text(
            f"the slots are HF {_names(identity.hf)} as the reader assumed: {src} read as "
            f"{READING_NAMES[r.convention]}, the file states no convention{tail}"
        )
    readings = "; ".join(
        f"read as {READING_NAMES[conv]} the slots are HF {_names(h)}"
        for conv, h in (
            (r.convention, identity.readings[0]),
            ("hf" if r.convention != "hf" else "layer_output", identity.readings[-1]),
        )
    )
    fits = ""
    if identity.draft_fits:
        names = " or ".join(READING_NAMES[f].split(" (")[0] for f in identity.draft_fits)
        fits = (
            f"; the draft's configured ids name captured slots when they are read as {names} "
            "(not decisive: those ids are what the doctor checks)"
        )
    return Text(
        f"{src} states no convention and nothing decides it: {readings}{fits}{tail}. The "
        "serving config gives no ids until it is decided",
        "pass --target DIR (the doctor then matches every slot to the state it equals), or state "
        'it: "index_convention": "hf" (or "speculators") in data_config.json\'s hidden_states, '
        "the target's num_hidden_layers there, or --slot-layers",
    )


# --- lm_head -------------------------------------------------------------------------------------
def lm_head(status, borrowed_from: str | None) -> Text:
    """A draft that ships no lm_head: what its config states, what each engine loads."""
    dvs = status.draft_vocab_size
    keys = [
        f"draft_vocab_size {dvs}" if dvs is not None else "no draft_vocab_size",
        f"tie_word_embeddings {str(status.tied).lower()}",
    ]
    if status.reuse_target:
        keys.append("reuse_target_lm_head true")
    if status.tied:
        sglang = "SGLang and vLLM tie it to the embedding"
    elif dvs is not None:
        sglang = (
            "SGLang keeps a randomly initialised head (its loader never reports a missing "
            "weight; sglang#27908: accept length 1.00)"
        )
    else:
        sglang = "SGLang loads the target's lm_head (no draft_vocab_size)"
    vllm = (
        "vLLM shares the target's lm_head with a draft that ships none (before vllm#28549 it "
        "replaced every draft's head with the target's)"
    )
    summary = f"the draft ships no lm_head.weight ({', '.join(keys)}): {sglang}; {vllm}"
    if borrowed_from is not None:
        rows = "its embedding" if status.tied else "the target's lm_head rows for the draft vocab"
        summary += f". Every other finding scores the draft with {rows} ({borrowed_from})"
        fix = (
            "if the draft was trained with its own head, ship lm_head.weight; if it borrows the "
            "target's, serve it with vLLM"
            + (
                "; SGLang serves it as shipped with a random head"
                + (
                    " (removing draft_vocab_size, which equals vocab_size, makes it load the "
                    "target's)"
                    if dvs == status.vocab_size
                    else ""
                )
                if status.sglang_random
                else ""
            )
        )
    else:
        summary += ". The other checks need a head to score the draft: none ran"
        fix = (
            "pass --target DIR (the doctor then scores the draft with the target's head), or "
            "ship the draft's own lm_head.weight [draft_vocab_size, hidden_size]"
        )
    return Text(summary, fix)


# --- norm flags ----------------------------------------------------------------------------------
NORM_ENGINES = {
    "norm_before_fc": "vLLM applies it (it copies the key from speculators configs); SGLang "
    "ignored the key and input_norm.weight until sglang#32334",
    "fc_norm": "engines with EAGLE 3.1 support apply it (vLLM #42764, speculators #670); others "
    "ignore fc_norm.{i}.weight",
}


def norm_flag(facts) -> Text:
    """A norm flag against its tensors, and (when both settings run) which one fits."""
    flag, on = facts.flag, facts.configured
    val, other = str(on).lower(), str(not on).lower()
    engines = NORM_ENGINES[facts.flag]
    if facts.missing:
        return Text(
            f"{flag} is true but {', '.join(facts.missing)} is not stored: the loader refuses "
            f"the draft, and an engine that applies {flag} has no weights for it; {engines}",
            f'ship {", ".join(facts.missing)}, or set "{flag}": false if the draft was trained '
            "without it",
        )
    scores = f"{facts.as_configured.fmt()} as configured, {facts.flipped.fmt()} with {flag}={other}"
    if facts.flipped_better:
        return Text(
            f"{flag}: the draft fits {flag}={other} ({scores}); it was trained with {other}"
            + (f", so {', '.join(facts.stored)} is stored but unused" if not on else ""),
            f'set "{flag}": {other} in config.json; {engines}',
        )
    if not on:
        return Text(
            f"{', '.join(facts.stored)} is stored but {flag} is false, so no engine reads it "
            f"({scores})",
            f'drop the tensor, or set "{flag}": true if the draft was trained with it',
        )
    return Text(f"{flag}={val} with its weights fits ({scores}); {engines}")


def norm_output() -> Text:
    return Text(
        "norm_output is true: speculators and vLLM feed the post-norm output to the next "
        "drafting step (steps >= 1 only; the doctor scores step 0); SpecForge reads a key of "
        "that name with another meaning, whether compute_logits applies the norm (SpecForge#879)"
    )


# --- target data ---------------------------------------------------------------------------------
def target_data(facts, low: bool) -> Text:
    share = f"{facts.agree.fmt()} of the loss-masked tokens in samples {list(facts.samples)}"
    if not low:
        return Text(
            f"{share} are the target's own greedy choice (all of them for greedy regeneration, "
            "fewer when sampled)"
        )
    return Text(
        f"only {share} are the target's own greedy choice: the responses look written by "
        "another model or by people, not regenerated by this target, so the draft learns a "
        "distribution it will not serve",
        "regenerate the responses with the target (eagle-inspect capture --generate N, or the "
        "trainer's regeneration step) and retrain",
    )


def long_context(facts, collapse: bool) -> Text:
    """The replayed accept length before and after `facts.split` tokens of context."""
    figures = (
        f"accept len {facts.early:.2f} in rounds starting within the first {facts.split} tokens "
        f"({facts.early_rounds} rounds), {facts.late:.2f} beyond ({facts.late_rounds} rounds)"
    )
    if not collapse:
        return Text(f"{figures}: no long-context collapse")
    return Text(
        f"{figures}: acceptance collapses with context length, which accuracy over short "
        "training windows never shows",
        "check the draft's rope settings against the target's (the rope finding: a dropped "
        "rope_scaling) and train at the context length the engine serves",
    )


def head_comparison(facts) -> Text:
    """The draft's own head against the target's rows for the draft vocab."""
    scores = (
        f"the draft's own lm_head scores {facts.own.fmt()}, the target's rows for the draft vocab "
        f"{facts.target.fmt()}"
    )
    if facts.target_clearly_better:
        return Text(
            f"{scores}: the draft was trained with the target's head, not the one it ships",
            "ship the target's rows as lm_head.weight (arange(D) + d2t of the target's lm_head), "
            "or serve with vLLM, which shares the target's head only with a draft that ships none",
        )
    tail = ""
    if facts.own_clearly_better:
        tail = (
            "; an engine that replaces a draft's head with the target's (vLLM before "
            "vllm#28549, vllm#27732) serves the lower figure"
        )
    return Text(f"{scores}{tail}")
