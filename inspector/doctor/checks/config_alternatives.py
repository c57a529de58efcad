"""Check: config values a trainer may have used instead of the ones config.json states.

Each alternative is the same draft (same weights) under one changed config value, scored on the
same rows with its own best candidate wiring, and compared with the best wiring as configured:
- norm_before_residual flipped: the first layer's residual is hidden_norm(h) when true, h when
  false (vLLM honours the key; SGLang's llama_eagle3 always uses the raw residual). When
  config.json omits the key the readers disagree: speculators' config class defaults it to false,
  vLLM's speculators-config parser (`update_eagle3`) to true, vLLM's flat Llama draft reads a
  missing attribute as false. The finding then says which reading the weights fit and which
  engine gets it wrong, and its fix writes the key;
- rope: the target's rope_theta / scaling, the default theta 10000, or no scaling;
- head_dim: RoPE over hidden_size/heads or 2*hidden_size/heads dims instead of head_dim. A
  speculators + transformers pitfall: a config without head_dim makes the trainer build its
  rotary table for 2*hidden_size/heads when the attention input is the doubled [embed, h] width.
  Over d dims instead of head_dim, the frequencies theta^(-2i/d) equal those of
  theta' = theta^(head_dim/d) over head_dim, which engines can be given.

Evidence: the configured counts, every alternative's counts and wiring, the winner's gain and
paired z. Fix: `Finding.config_fix`, the keys `--write-fixed` writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from inspector.doctor.checks.config_variants import (
    Alternative,
    alternatives,
    reads_nowhere,
    residual_readings,
    target_rope,
)
from inspector.doctor.finding import ConfigFix, Finding, Kind, Severity
from inspector.doctor.phrasing import Text
from inspector.doctor.stats import clearly_better, counts_of, paired_hits_z, severity_for_gain
from inspector.doctor.wiring.search import Scorer
from inspector.draft import Draft, DraftConfig, RopeConfig
from inspector.engines import Engine
from inspector.errors import InputError
from inspector.evaluate import Evaluator
from inspector.metrics import Counts
from inspector.progress import StageProgress
from inspector.wiring import Wiring

# the engines' names from the registry (a rename is one edit in inspector/engines/)
_SGLANG, _VLLM = (
    Engine.SGLANG.display,
    Engine.VLLM.display,
)

KINDS = (Kind.NORM_BEFORE_RESIDUAL, Kind.ROPE, Kind.HEAD_DIM)
RESIDUAL_INERT = (0.8, 1.25)  # hidden_norm weight RMS / fc output RMS in this range: inert flag


@dataclass
class AlternativeScore:
    alternative: Alternative
    hits: np.ndarray
    wiring: tuple[int, ...]

    @property
    def counts(self) -> Counts:
        return counts_of(self.hits)


@dataclass
class ConfigFacts:
    """The figures of one kind. rope_dim: the winning head_dim alternative's RoPE dimension.
    missing_head_dim: config.json has no head_dim and q_proj implies another than hidden/heads."""

    kind: Kind
    configured: Counts
    scores: list[AlternativeScore]
    config: dict  # the configured values this kind is about
    winner: AlternativeScore | None = None
    gain: float | None = None
    z: float | None = None
    missing_head_dim: bool = False
    residual_scale: dict | None = None
    # norm_before_residual: hidden_norm(h) ~ h (RMS ratio within RESIDUAL_INERT), so the flag
    # barely changes this draft's output.
    residual_norm_inert: bool = False
    # norm_before_residual: the value the weights fit (None: the flip is not clearly worse or
    # better), and the value each reader takes from config.json (see `residual_readings`).
    fits: bool | None = None
    readings: dict[str, bool] | None = None

    @property
    def misread_by(self) -> list[str]:
        """The readers that take another norm_before_residual than the weights fit."""
        if self.fits is None or self.readings is None:
            return []
        return [who for who, v in self.readings.items() if v != self.fits]

    def to_dict(self) -> dict:
        out: dict = {
            "configured": self.configured.to_dict(),
            "alternatives": {
                s.alternative.label: {**s.counts.to_dict(), "wiring": list(s.wiring)}
                for s in self.scores
            },
            **self.config,
        }
        if self.winner is not None:
            out["best_alternative"] = self.winner.alternative.label
            out["gain"] = round(self.gain or 0.0, 4)
            out["z"] = round(self.z or 0.0, 2)
            if self.winner.alternative.rope_dim is not None:
                out["rope_dim"] = self.winner.alternative.rope_dim
        if self.residual_scale is not None:
            out.update(self.residual_scale)
        if self.readings is not None:
            out["readings"] = dict(self.readings)
            out["fits"] = self.fits
            out["misread_by"] = self.misread_by
        return out


@dataclass
class ConfigCheckResult:
    findings: list[Finding] = field(default_factory=list)
    corrected: Draft | None = None  # every winning alternative applied, when one wins


def _score(
    ev: Evaluator,
    samples: Sequence[int],
    alts: list[Alternative],
    cands: list[tuple[int, ...]],
    shift: int,
    progress: StageProgress | None,
) -> list[AlternativeScore]:
    """Each alternative's best candidate wiring and its hits."""
    scorers = [Scorer(ev, draft=a.draft, shift=shift) for a in alts]
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
    out = []
    for alt, part in zip(alts, parts, strict=True):
        hits = {w: np.concatenate(v) if v else np.zeros(0, bool) for w, v in part.items()}
        w_best = max(cands, key=lambda w: int(hits[w].sum()))
        out.append(AlternativeScore(alt, hits[w_best], w_best))
    return out


def _facts(kind: Kind, draft: Draft, trope: RopeConfig | None, base_hits: np.ndarray, scores):
    cfg = draft.config
    config: dict = {}
    if kind == Kind.NORM_BEFORE_RESIDUAL:
        config = {
            "norm_before_residual": cfg.norm_before_residual,
            "explicit": cfg.norm_before_residual_explicit,
        }
    elif kind == Kind.ROPE:
        config = {
            "theta": cfg.rope.theta,
            "rope_type": cfg.rope.rope_type,
            "scaling": cfg.rope.scaling,
        }
        if trope is not None:
            config["target"] = {
                "theta": trope.theta,
                "rope_type": trope.rope_type,
                "scaling": trope.scaling,
            }
    else:
        config = {
            "head_dim": cfg.head_dim,
            "explicit": cfg.head_dim_explicit,
            "hidden_size/heads": cfg.hidden_size // cfg.num_heads,
            "2*hidden_size/heads": 2 * cfg.hidden_size // cfg.num_heads,
        }
    facts = ConfigFacts(kind, counts_of(base_hits), scores, config)
    facts.missing_head_dim = (
        kind == Kind.HEAD_DIM
        and not cfg.head_dim_explicit
        and cfg.head_dim != cfg.hidden_size // cfg.num_heads
    )
    for s in scores:
        if clearly_better(s.hits, base_hits) and (
            facts.winner is None or s.hits.sum() > facts.winner.hits.sum()
        ):
            facts.winner = s
    if facts.winner is not None:
        facts.gain = float(facts.winner.hits.mean() - base_hits.mean())
        facts.z = paired_hits_z(facts.winner.hits, base_hits)
    if kind == Kind.NORM_BEFORE_RESIDUAL:
        facts.readings = residual_readings(cfg)
        if facts.winner is not None:
            facts.fits = facts.winner.alternative.draft.config.norm_before_residual
        elif scores and all(clearly_better(base_hits, s.hits) for s in scores):
            facts.fits = cfg.norm_before_residual
            # What a reader of the other value loses.
            facts.gain = float(base_hits.mean() - max(s.hits.mean() for s in scores))
    return facts


def _finding(facts: ConfigFacts, cfg) -> Finding:
    fix = facts.winner.alternative.config_fix if facts.winner is not None else ConfigFix()
    if facts.missing_head_dim:
        fix = fix.merged(ConfigFix(head_dim=cfg.head_dim))
        severity = Severity.ERROR
    elif facts.winner is not None:
        severity = severity_for_gain(facts.gain or 0.0)
    elif facts.kind == Kind.NORM_BEFORE_RESIDUAL and _unpinned_misread(facts, cfg):
        # The weights fit the configured value, but the key is absent and an engine reads the
        # other one: writing it pins every reader that honours it.
        severity = severity_for_gain(facts.gain or 0.0)
        fix = ConfigFix(norm_before_residual=facts.fits)
    else:
        severity = Severity.INFO
    text = config_text(facts, cfg, fix)
    return Finding(
        facts.kind, severity, text.summary, text.fix, facts, config_fix=None if fix.empty else fix
    )


def _unpinned_misread(facts: ConfigFacts, cfg) -> bool:
    """The key is absent and a reader that honours it takes the value the weights do not fit."""
    honouring = [w for w in facts.misread_by if not reads_nowhere(w)]
    return not cfg.norm_before_residual_explicit and bool(honouring)


def _residual_scale(ev: Evaluator, samples: Sequence[int], best: tuple[int, ...]) -> dict | None:
    """RMS of the fc output (masked rows of the first readable sample) and of hidden_norm's weight:
    when their ratio is ~1, hidden_norm(h) ~ h and norm_before_residual changes little."""
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


def _corrected(draft: Draft, findings_facts: list[ConfigFacts]) -> Draft | None:
    """The draft with every winning alternative applied (rope and head_dim both change the rope:
    the first winner keeps it)."""
    corrected, changed = draft, False
    for facts in findings_facts:
        if facts.winner is None:
            continue
        c = facts.winner.alternative.draft.config
        if facts.kind == Kind.NORM_BEFORE_RESIDUAL:
            new_cfg = replace(corrected.config, norm_before_residual=c.norm_before_residual)
            corrected = replace(corrected, config=new_cfg)
        elif corrected.config.rope == draft.config.rope:
            corrected = replace(corrected, config=replace(corrected.config, rope=c.rope))
        changed = True
    return corrected if changed else None


def config_checks(
    ev: Evaluator,
    samples: Sequence[int],
    candidates: Sequence[tuple[int, ...]],
    base_hits: np.ndarray,
    *,
    best: tuple[int, ...],
    shift: int = 0,
    target_config: str | Path | None = None,
    progress: StageProgress | None = None,
) -> ConfigCheckResult:
    """Re-run the candidate wirings under each alternative config; a finding per kind.

    A wrong config also distorts the wiring search, so each alternative is scored with its own
    best candidate (the search's top wirings and the named ones) and compared with `base_hits`,
    the best wiring `best` as configured. When some alternative is clearly better, the result
    carries the draft with every winning alternative applied (the doctor then searches again).
    """
    draft = ev.draft
    trope = target_rope(ev, target_config)
    alts = alternatives(draft, trope)
    cands = list(dict.fromkeys(tuple(w) for w in candidates))
    scores = _score(ev, samples, alts, cands, shift, progress)
    all_facts = []
    result = ConfigCheckResult()
    for kind in KINDS:
        mine = [s for s in scores if s.alternative.kind == kind]
        facts = _facts(kind, draft, trope, base_hits, mine)
        if kind == Kind.NORM_BEFORE_RESIDUAL:
            scale = facts.residual_scale = _residual_scale(ev, samples, best)
            if scale is not None:
                ratio = scale["hidden_norm_weight_rms"] / max(scale["fc_output_rms"], 1e-12)
                facts.residual_norm_inert = RESIDUAL_INERT[0] <= ratio <= RESIDUAL_INERT[1]
        all_facts.append(facts)
        result.findings.append(_finding(facts, draft.config))
    result.corrected = _corrected(draft, all_facts)
    return result


# --- words ---------------------------------------------------------------------------------------
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
    if facts.kind == Kind.NORM_BEFORE_RESIDUAL:
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
            text += (
                f"; {_VLLM} honours the key, while {_SGLANG}'s llama_eagle3 has no such branch "
                "and always uses the raw residual"
            )
        return Text(summary, text)
    if facts.kind == Kind.ROPE:
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
        why = " (no such branch: raw residual)" if reads_nowhere(who) else ""
        parts.append(f"{who} reads {str(v).lower()}{why}")
    return "config.json has no norm_before_residual key, and readers differ: " + ", ".join(parts)


def config_text(facts: ConfigFacts, cfg: DraftConfig, fix: ConfigFix) -> Text:
    """The words of one kind's finding: the winner, the missing head_dim, or what fits."""
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
    if facts.kind == Kind.ROPE:
        return Text(
            f"rope as configured (theta {cfg.rope.theta:g}, {cfg.rope.rope_type}) fits: {base} "
            f"(tried {tried})"
        )
    if facts.kind == Kind.HEAD_DIM:
        return Text(f"head_dim {cfg.head_dim} fits: {base} (tried {tried})")
    summary = (
        f"norm_before_residual={str(cfg.norm_before_residual).lower()} fits: {base} (tried {tried})"
    )
    if not cfg.norm_before_residual_explicit:
        summary += "; " + residual_readers(facts)
        wrong = [w for w in facts.misread_by if not reads_nowhere(w)]
        if wrong and facts.fits is not None:
            val = str(facts.fits).lower()
            return Text(
                summary + f": {' and '.join(wrong)} will run the draft with the wrong residual",
                f'write "norm_before_residual": {val} into config.json so every reader that '
                "honours the key agrees",
            )
    if cfg.norm_before_residual:
        summary += (
            f"; note {_SGLANG}'s llama_eagle3 ignores the key (raw residual): serve with {_VLLM}"
        )
    scale = facts.residual_scale
    if scale is not None and facts.residual_norm_inert:
        summary += (
            f"; the fc output's RMS is {scale['fc_output_rms']:.3g} and hidden_norm's weight "
            f"{scale['hidden_norm_weight_rms']:.3g}, so the normed and the raw residual nearly "
            "coincide: the flag barely matters for this draft"
        )
    return Text(summary)
