"""The grid of engine settings `accept --sweep` replays, and the cost model it ranks them by.

Cost model (docs/metrics.md): one round costs steps * c_draft (the draft forwards, each one
batched over the beam's topk nodes) plus c_verify(N) = verify + per_token * (N - 1) (the
target's forward over the N tokens, root included), in units of one plain target decode step;
speedup = accept_length / round_cost, the tokens per unit of time against plain decoding (one
token per target step). No torch here: the parser reads the defaults.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields

from inspector.engines import Engine
from inspector.errors import InputError, setting_field
from inspector.serving.spec import DraftSpec

# The grid where the user names none: the steps engines serve around (SGLang's and vLLM's
# examples use 3), chains and two tree widths, budgets as SGLang's docs suggest (4..16).
DEFAULT_STEPS = (1, 2, 3, 4)
DEFAULT_TOPK = (1, 2, 4)
DEFAULT_TOKENS = (4, 8, 16)


@dataclass(frozen=True)
class CostModel:
    """What a round costs, as ratios to one plain target decode step.

    draft: one draft forward (a step of the beam, its topk nodes batched: as the engines run it);
    verify: the target's verification forward of a round, whatever its width;
    per_token: added per verified token past the root: 0 where decoding is memory-bound (a small
      batch: verifying 16 tokens costs what 1 does), > 0 where the batch makes it compute-bound.
    """

    draft: float = 0.05
    verify: float = 1.0
    per_token: float = 0.0

    @classmethod
    def parse(cls, text: str | None) -> CostModel:
        """`draft=0.05,verify=1.0,per_token=0.0`, any subset; the rest keep their defaults."""
        if not text:
            return cls()
        names = {f.name for f in fields(cls)}
        values: dict[str, float] = {}
        for part in text.split(","):
            key, sep, val = part.partition("=")
            key = key.strip().replace("-", "_")
            if not sep or key not in names:
                raise InputError(
                    None,
                    setting_field("cost"),
                    f"{part!r}: NAME=VALUE, NAME one of draft, verify, per_token",
                )
            try:
                values[key] = float(val)
            except ValueError:
                raise InputError(
                    None, setting_field("cost"), f"{part!r}: {val!r} is not a number"
                ) from None
            if values[key] < 0:
                raise InputError(None, setting_field("cost"), f"{part!r}: a cost is not negative")
        model = cls(**values)
        if model.verify + model.per_token <= 0:
            raise InputError(None, setting_field("cost"), "a round must cost something: verify > 0")
        return model

    def verify_cost(self, tokens: int) -> float:
        """c_verify(N): the target's forward over N tokens, the root included."""
        return self.verify + self.per_token * (tokens - 1)

    def round_cost(self, spec: DraftSpec) -> float:
        assert spec.draft_tokens is not None
        return spec.steps * self.draft + self.verify_cost(spec.draft_tokens)

    def speedup(self, accept_length: float | None, spec: DraftSpec) -> float | None:
        """Tokens per unit of time against plain decoding (one token per target step)."""
        return None if accept_length is None else accept_length / self.round_cost(spec)

    def to_dict(self) -> dict:
        return {"draft": self.draft, "verify": self.verify, "per_token": self.per_token}

    def describe(self) -> str:
        return (
            f"round cost = steps x {self.draft:g} (draft forward) + {self.verify:g} (verify)"
            f" + {self.per_token:g} x (draft tokens - 1), in target decode steps"
        )


def sweep_grid(
    steps: Iterable[int],
    topks: Iterable[int],
    tokens: Iterable[int],
    *,
    kv: str = "exact",
    engine: Engine | None = None,
) -> tuple[list[DraftSpec], list[str]]:
    """The valid settings of the grid, in grid order (topk, steps, tokens), and why each other
    combination was left out: DraftSpec's own rules (a chain verifies steps + 1 tokens, so its
    budgets are one setting; a tree's budget is 2..candidates + 1), and vLLM drafts no trees."""
    out: list[DraftSpec] = []
    skipped: list[str] = []
    for k in sorted(set(topks)):
        if k > 1 and engine is not None and not engine.spec.trees:
            skipped.append(f"topk {k}: {engine.display} drafts chains only")
            continue
        for s in sorted(set(steps)):
            if k == 1:
                out.append(DraftSpec(s, 1, kv=kv))
                continue
            for n in sorted(set(tokens)):
                try:
                    out.append(DraftSpec(s, k, n, kv=kv))
                except InputError:
                    skipped.append(f"steps {s} topk {k} draft tokens {n}")
    if not out:
        raise InputError(None, setting_field("sweep-steps"), "no valid setting in the grid")
    return out, skipped
