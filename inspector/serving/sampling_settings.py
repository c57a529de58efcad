"""A request's sampling settings and the engines' verification rules, as flags and JSON name
them (no torch here: the CLI's parser reads the rule names). The rules' mathematics and their
random process are `sampling`'s; its docstring says what each rule does.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from inspector.engines import Engine
from inspector.engines import engine as serving_engine
from inspector.errors import InputError, setting_field

# the engines' names from the registry (a rename is one edit in inspector/engines/)
_SGLANG = Engine.SGLANG.display


@dataclass(frozen=True)
class Sampling:
    """A request's sampling settings, as the engines take them (`top_k` 0 and `top_p` 1: off;
    vLLM and SGLang spell off as -1 and 1.0)."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        if not self.temperature >= 0:
            raise InputError(
                None, setting_field("temperature"), f"{self.temperature}: must be >= 0"
            )
        if self.top_k < 0:
            raise InputError(None, setting_field("top-k"), f"{self.top_k}: must be >= 0 (0: off)")
        if not 0 < self.top_p <= 1:
            raise InputError(
                None, setting_field("top-p"), f"{self.top_p}: must be in (0, 1] (1: off)"
            )

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def label(self) -> str:
        if self.greedy:
            return "greedy (temperature 0)"
        parts = [f"temperature {self.temperature:g}"]
        if self.top_k:
            parts.append(f"top-k {self.top_k}")
        if self.top_p < 1:
            parts.append(f"top-p {self.top_p:g}")
        return ", ".join(parts)

    def to_dict(self) -> dict:
        return {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p}


class VerifyRule(str, Enum):
    VLLM_ONEHOT = "vllm-onehot"
    VLLM_PROBABILISTIC = "vllm-probabilistic"
    SGLANG_TARGET_ONLY = "sglang-target-only"
    SGLANG_REJECTION = "sglang-rejection"
    # llama.cpp: the draft's argmax, accepted while the target's own sample equals it
    LLAMACPP_TARGET_ONLY = "llamacpp-target-only"

    @property
    def samples_drafts(self) -> bool:
        """Whether the draft's tokens are sampled from q (chains only) rather than its top-k."""
        return self in (VerifyRule.VLLM_PROBABILISTIC, VerifyRule.SGLANG_REJECTION)

    @property
    def engine(self) -> str:
        return self.value.split("-", 1)[0]


RULES = tuple(r.value for r in VerifyRule)


@dataclass(frozen=True)
class Verification:
    """A verification rule and SGLang's two thresholds (1.0: lossless, its default)."""

    rule: VerifyRule = VerifyRule.VLLM_ONEHOT
    threshold_single: float = 1.0
    threshold_acc: float = 1.0

    def __post_init__(self) -> None:
        for name, t in (("single", self.threshold_single), ("acc", self.threshold_acc)):
            if not 0 <= t <= 1:
                raise InputError(None, f"--threshold-{name}", f"{t}: must be in [0, 1]")
        if self.threshold_acc == 0:
            raise InputError(
                None, setting_field("threshold-acc"), f"0: {_SGLANG} divides by it; use > 0"
            )
        lossy = self.threshold_single < 1 or self.threshold_acc < 1
        if lossy and self.rule is not VerifyRule.SGLANG_TARGET_ONLY:
            raise InputError(
                None,
                setting_field("threshold-single"),
                f"thresholds below 1 are {_SGLANG}'s target-only verification's, not "
                f"{self.rule.value}",
            )

    def check_tree(self, is_chain: bool) -> None:
        if not is_chain and self.rule is not VerifyRule.SGLANG_TARGET_ONLY:
            raise InputError(
                None,
                setting_field("verify"),
                f"{self.rule.value} verifies chains (--topk 1); trees: sglang-target-only",
            )

    def to_dict(self) -> dict:
        d: dict = {"rule": self.rule.value}
        if self.rule is VerifyRule.SGLANG_TARGET_ONLY:
            d["threshold_single"] = self.threshold_single
            d["threshold_acc"] = self.threshold_acc
        return d


def default_rule(engine: str) -> VerifyRule:
    """Each engine's default at temperature > 0 (drafts from the draft's top-k, target-only):
    its module's `default_verify`."""
    return VerifyRule(serving_engine(engine).default_verify)


def parse_rule(text: str | None, engine: str) -> VerifyRule:
    if text is None:
        return default_rule(engine)
    try:
        rule = VerifyRule(text.strip().lower())
    except ValueError:
        raise InputError(
            None, setting_field("verify"), f"{text!r}: one of {', '.join(RULES)}"
        ) from None
    if rule.engine != engine:
        raise InputError(
            None, setting_field("verify"), f"{rule.value} is not {engine}'s rule (--engine)"
        )
    return rule


@dataclass(frozen=True)
class SamplingSettings:
    """What a loop sampled at: the request's settings and the verification rule."""

    sampling: Sampling
    verification: Verification

    @classmethod
    def on_samples(
        cls, sampling: Sampling, verification: Verification, *, chain: bool
    ) -> SamplingSettings:
        """Settings an expectation on saved samples can run under: only the target-only rules,
        whose odds the target's distributions at the drafted nodes give, apply there (InputError
        naming the flag otherwise)."""
        if verification.rule.samples_drafts:
            raise InputError(
                None,
                setting_field("verify"),
                f"{verification.rule.value} samples its drafts: on saved samples only the "
                "target-only rules apply (accept --live runs it)",
            )
        verification.check_tree(chain)
        return cls(sampling, verification)

    def label(self) -> str:
        if self.sampling.greedy:
            return self.sampling.label()
        return f"{self.sampling.label()}, {self.verification.rule.value} verification"

    def to_dict(self) -> dict:
        return {**self.sampling.to_dict(), "verification": self.verification.to_dict()}
