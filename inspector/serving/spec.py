"""The engine's drafting settings, named as SGLang and vLLM name them."""

from __future__ import annotations

from dataclasses import dataclass

from inspector.engines import Engine, all_engines
from inspector.errors import InputError, setting_field

# the engines' names from the registry (a rename is one edit in inspector/engines/)
_LLAMACPP, _SGLANG, _VLLM = (
    Engine.LLAMACPP.display,
    Engine.SGLANG.display,
    Engine.VLLM.display,
)

EXACT_KV = "exact"
# exact, or an engine's own tree-draft KV reading (its module's `tree_kv`: SGLang's)
KV_MODES = (EXACT_KV, *(s.tree_kv for s in all_engines() if s.tree_kv))
# Draft steps per round where the user names none: SGLang's and vLLM's EAGLE-3 examples serve
# 3 (`--speculative-num-steps 3`, `num_speculative_tokens: 3`). The one default of every command,
# the doctor's replay and the app.
DEFAULT_STEPS = 3
# llama.cpp's draft sampler keeps the draft's top 10 and softmaxes over them (`top_k = 10`, then
# the default `dist` sampler: common/speculative.cpp and src/llama-sampler.cpp
# in llama.cpp as vendored by llama-cpp-python 0.3.36): `p_min` is held against the top-1
# probability renormalised over those 10.
P_MIN_TOP_K = 10


@dataclass(frozen=True)
class DraftSpec:
    """How an engine drafts each round.

    steps: draft forwards per round, the tree's depth (SGLang `--speculative-num-steps`; vLLM
      `num_speculative_tokens` with topk 1);
    topk: branches per node (SGLang `--speculative-eagle-topk`; 1 is a chain);
    draft_tokens: tokens the target verifies per round, the root included (SGLang
      `--speculative-num-draft-tokens`); a chain verifies steps + 1.
    """

    steps: int
    topk: int = 1
    draft_tokens: int | None = None
    # How a tree node's draft attention reads earlier levels: "exact" (its own ancestors, the
    # EAGLE reference) or "sglang" (SGLang's topk > 1 draft decode: each beam row reads its own
    # row's earlier KV, not its parent's - an approximation of the engine's).
    kv: str = "exact"
    # llama.cpp's early stop (`--spec-draft-p-min`, `--spec-draft-n-min`; its EAGLE-3 drafter,
    # common/speculative.cpp): a chain stops drafting at the first step whose
    # top-1 probability (over the draft's top `P_MIN_TOP_K`) is below p_min, that token dropped;
    # a draft shorter than n_min is dropped whole (the round drafts nothing). The live loop
    # honours them (0: off, llama.cpp's defaults, common/common.h).
    p_min: float = 0.0
    n_min: int = 0

    def __post_init__(self) -> None:
        if self.kv not in KV_MODES:
            raise InputError(
                None, setting_field("kv"), f"{self.kv!r}: one of {', '.join(KV_MODES)}"
            )
        if not 0.0 <= self.p_min <= 1.0:
            raise InputError(None, setting_field("p-min"), f"{self.p_min}: a probability, 0..1")
        if self.n_min < 0:
            raise InputError(None, setting_field("n-min"), f"{self.n_min}: must be at least 0")
        if (self.p_min > 0 or self.n_min > 0) and self.topk != 1:
            raise InputError(
                None, setting_field("p-min"), f"{_LLAMACPP}'s early stop drafts chains: --topk 1"
            )
        if self.steps < 1:
            raise InputError(None, setting_field("steps"), f"{self.steps}: must be at least 1")
        if self.topk < 1:
            raise InputError(None, setting_field("topk"), f"{self.topk}: must be at least 1")
        n = self.draft_tokens
        if self.topk == 1:
            # SGLang forces num_draft_tokens = steps + 1 for a chain; so do we.
            if n is not None and n != self.steps + 1:
                raise InputError(
                    None,
                    setting_field("draft-tokens"),
                    f"{n}: a chain (topk 1) verifies steps + 1 = {self.steps + 1} tokens",
                )
            object.__setattr__(self, "draft_tokens", self.steps + 1)
            return
        if n is None:
            raise InputError(
                None, setting_field("draft-tokens"), f"required with --topk {self.topk}"
            )
        most = self.candidates + 1
        if not 2 <= n <= most:
            raise InputError(
                None,
                setting_field("draft-tokens"),
                f"{n}: a tree of {self.steps} steps and topk {self.topk} has {self.candidates} "
                f"candidate nodes, so 2..{most} tokens (the root included)",
            )

    @property
    def candidates(self) -> int:
        """Nodes the beam proposes: topk at the first level, topk^2 at each later one."""
        return self.topk + (self.steps - 1) * self.topk * self.topk

    @property
    def is_chain(self) -> bool:
        return self.topk == 1

    @property
    def mode(self) -> str:
        return "chain" if self.is_chain else "tree"

    def to_dict(self) -> dict:
        d: dict = {"steps": self.steps, "topk": self.topk, "draft_tokens": self.draft_tokens}
        if self.kv != "exact":
            d["kv"] = self.kv
        if self.early_stop:
            d["p_min"] = self.p_min
            d["n_min"] = self.n_min
        return d

    @property
    def early_stop(self) -> bool:
        """Whether a round may draft fewer than `steps` tokens (llama.cpp's p_min / n_min)."""
        return self.p_min > 0 or self.n_min > 0

    def flags(self) -> str:
        """The engine flags that select these settings."""
        sg = (
            f"{_SGLANG} --speculative-num-steps {self.steps} --speculative-eagle-topk {self.topk} "
            f"--speculative-num-draft-tokens {self.draft_tokens}"
        )
        if self.early_stop:
            return (
                f"{_LLAMACPP} --spec-draft-n-max {self.steps} --spec-draft-p-min {self.p_min:g} "
                f"--spec-draft-n-min {self.n_min}"
            )
        if self.is_chain:
            return f"{sg}; {_VLLM} num_speculative_tokens {self.steps}"
        return sg
