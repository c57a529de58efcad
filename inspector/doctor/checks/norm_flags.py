"""Check: the optional norms' config flags against the tensors the checkpoint stores, one finding
kind per concern.

- `norm_before_fc` with `input_norm.weight` [N*Ht]: an RMSNorm over the concatenated slots before
  fc (speculators; gpt-oss drafts). vLLM applies it (the key is copied from speculators configs);
  SGLang ignored both the key and the tensor until sglang#32334.
- `fc_norm` with `fc_norm.{i}.weight` [Ht] per slot (EAGLE 3.1; speculators #670, vLLM #42764):
  an engine without EAGLE 3.1 support ignores them.
- `norm_output` has no tensor: it feeds the post-norm output to the next TTT step (speculators,
  vLLM); SpecForge reads a key of that name with another meaning, whether compute_logits applies
  the norm (SpecForge#879). It does not change step 0, which is what the doctor scores.

A flag without its tensors stops the loader, so the pipeline checks for it first
(`missing_norm_findings`) and reports it alone. A stored tensor without its flag is ignored by
every engine: the check reruns the recommended wiring with the flag flipped (and a set flag with
its tensors off), so the finding says which setting the draft was trained with.

Evidence: the flag, the tensors, the counts as configured and flipped. Fix: the flag's value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from inspector.doctor.checks.draft_shape import config_flag, stated_flags
from inspector.doctor.finding import Finding, Kind, Severity
from inspector.doctor.phrasing import Text
from inspector.doctor.stats import clearly_better, counts_of, severity_for_gain
from inspector.doctor.wiring.search import Scorer
from inspector.engines import Engine
from inspector.errors import InputError
from inspector.evaluate import Evaluator
from inspector.formats.checkpoint import canonical_name
from inspector.formats.tensorfiles import find_weight_file, read_json, tensor_names
from inspector.metrics import Counts

# the engines' names from the registry (a rename is one edit in inspector/engines/)
_SGLANG, _VLLM = (
    Engine.SGLANG.display,
    Engine.VLLM.display,
)

FLAGS = ("norm_before_fc", "fc_norm")


def tensors_of(flag: str, n_blocks: int) -> list[str]:
    """The tensors a norm flag needs."""
    if flag == "norm_before_fc":
        return ["input_norm.weight"]
    return [f"fc_norm.{i}.weight" for i in range(n_blocks)]


@dataclass(frozen=True)
class NormFacts:
    """One concern: the flag as configured, which of its tensors are stored, and the scores of
    the recommended wiring as configured and with the flag flipped (None: not run)."""

    flag: str
    configured: bool
    tensors: tuple[str, ...]
    stored: tuple[str, ...]
    as_configured: Counts | None = None
    flipped: Counts | None = None
    flipped_better: bool = False

    @property
    def missing(self) -> tuple[str, ...]:
        return tuple(t for t in self.tensors if t not in self.stored)

    def to_dict(self) -> dict:
        out: dict = {
            "flag": self.flag,
            "configured": self.configured,
            "tensors": list(self.tensors),
            "stored": list(self.stored),
        }
        if self.as_configured is not None:
            out["as_configured"] = self.as_configured.to_dict()
        if self.flipped is not None:
            out["flipped"] = self.flipped.to_dict()
            out["flipped_clearly_better"] = self.flipped_better
        return out


def missing_norm_findings(checkpoint: str | Path, n_blocks: int = 3) -> list[Finding]:
    """Flags set without their tensors (the loader refuses such a draft): an error each, read
    from config.json and the tensor names only. [] when the folder cannot be read."""
    folder = Path(checkpoint)
    folder = folder.parent if folder.is_file() else folder
    try:
        cfg = read_json(folder / "config.json")
        names = {canonical_name(n) for n in tensor_names(find_weight_file(folder))}
    except InputError:
        return []
    out = []
    for flag in FLAGS:
        if not config_flag(cfg, flag):
            continue
        if flag == "fc_norm":
            n = sum(1 for k in names if k.startswith("fc_norm.") and k.endswith(".weight"))
            n_blocks = max(n_blocks, n)
        tensors = tensors_of(flag, n_blocks)
        facts = NormFacts(flag, True, tuple(tensors), tuple(t for t in tensors if t in names))
        if facts.missing:
            text = norm_flag_text(facts)
            out.append(Finding(Kind(flag), Severity.ERROR, text.summary, text.fix, facts))
    return out


def draft_hits(ev: Evaluator, samples: Sequence[int], draft, wiring: tuple[int, ...], shift: int):
    """Per-position hits of `wiring` under `draft`, through its own evaluator: the fc
    projections an evaluator caches depend on the draft's norm flags (and its weights)."""
    own = Evaluator(draft, ev.samples, budget=ev.budget, slot_layers=ev.slot_layers)
    scorer = Scorer(own, shift=shift)
    parts = []
    for i in samples:
        try:
            (r,) = scorer.score(i, [wiring])
        except InputError:
            continue
        parts.append(r.hit)
    return np.concatenate(parts) if parts else np.zeros(0, bool)


def norm_flag_checks(
    ev: Evaluator, samples: Sequence[int], wiring: tuple[int, ...], *, shift: int = 0, draft=None
) -> list[Finding]:
    """One finding per flag that config.json sets or whose tensors are stored (none for a draft
    with neither), plus norm_output when set. Both settings are scored on `wiring` when the
    tensors allow: engines follow config.json, so "as configured" is the stated flag."""
    draft = draft if draft is not None else ev.draft
    cfg = draft.config
    stated = stated_flags(draft) or {flag: bool(getattr(cfg, flag)) for flag in FLAGS}
    out: list[Finding] = []
    for flag in FLAGS:
        on = stated[flag]
        tensors = tensors_of(flag, cfg.num_fc_blocks)
        stored = tuple(t for t in tensors if t in draft.weights)
        if not on and not stored:
            continue
        facts = NormFacts(flag, on, tuple(tensors), stored)
        if facts.missing:
            severity = Severity.ERROR
        else:  # both settings run: which one was the draft trained with?
            configured = replace(draft, config=replace(cfg, **{flag: on}))
            flipped = replace(draft, config=replace(cfg, **{flag: not on}))
            base = draft_hits(ev, samples, configured, wiring, shift)
            alt = draft_hits(ev, samples, flipped, wiring, shift)
            better = bool(clearly_better(alt, base))
            facts = replace(
                facts, as_configured=counts_of(base), flipped=counts_of(alt), flipped_better=better
            )
            severity = (
                severity_for_gain(float(alt.mean() - base.mean())) if better else Severity.INFO
            )
            if not on and not better:
                severity = Severity.WARNING  # a stored tensor no engine reads
        text = norm_flag_text(facts)
        out.append(Finding(Kind(flag), severity, text.summary, text.fix, facts))
    if cfg.norm_output:
        text = norm_output_text()
        out.append(Finding(Kind.NORM_OUTPUT, Severity.INFO, text.summary, text.fix, None))
    return out


# --- words ---------------------------------------------------------------------------------------
NORM_ENGINES = {
    "norm_before_fc": f"{_VLLM} applies it (it copies the key from speculators configs); "
    f"{_SGLANG} ignored the key and input_norm.weight until sglang#32334",
    "fc_norm": f"engines with EAGLE 3.1 support apply it ({_VLLM} #42764, speculators #670); "
    "others ignore fc_norm.{i}.weight",
}


def norm_flag_text(facts: NormFacts) -> Text:
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


def norm_output_text() -> Text:
    return Text(
        f"norm_output is true: speculators and {_VLLM} feed the post-norm output to the next "
        "drafting step (steps >= 1 only; the doctor scores step 0); SpecForge reads a key of "
        "that name with another meaning, whether compute_logits applies the norm (SpecForge#879)"
    )
