"""The live loop of a block draft (DFlash, DFlash2): real speculative decoding of one prompt
against the transformers target, the draft proposing a whole block per round.

The target's side is the EAGLE loop's (`live_sequence.Decoding`: the prefill, the verify forward
over its KV cache, the greedy verdict, the cache trimmed to the accepted path, the stop and
SGLang's round after it); the draft's side is replaced:

1. prefill: the target runs the prompt x_0..x_{P-1} and emits x_P; the draft keeps the prompt's
   features at its wired layers (rows 0..P-1), nothing else;
2. each round after committed x_0..x_n: the block [x_n, mask, ..., mask] (k = the engine's
   num_speculative_tokens masks, the anchor first) runs through the draft's one forward
   (`model.block.anchored_block_hidden`, the block replay's) over the context rows 0..n-1, the
   target's features the loop kept; block row i drafts x_{n+i}: its argmax, or DFlash2's
   selector path (`model.block.selector_path`), as the reference and the replay choose;
3. the target verifies the k drafted tokens as a chain (the root x_n and k tokens, one forward),
   accepts the leading ones equal to its argmax and emits its bonus; the committed rows' features
   (of that verify forward) join the context. The count is the whole accepted prefix, past the
   stop too, as vLLM counts a DFlash round (`per_step_accepted`, `num_drafts`).

So a round reads exactly what the block replay's round at anchor n reads (the features of rows
0..n-1 as the written sample holds them, the block at positions n..n+k), and the replay of the
written sequences (`evaluate.block_eval`, which reads the continuation past the stop the sample
carries) gives the loop's counts round for round.

Memory: the target keeps its KV cache, trimmed to the committed rows after every verify (the
loop's `trim_cache`), so a round costs one forward of k + 1 tokens; the draft keeps no cache: it
recomputes its context's fc and keys from the kept features each round (the reference crops its
cache back to the context after each round, and a context row's keys depend on its own features
and position only, so the recompute gives the same logits). What grows is the features of the
context ([n, wired layers x hidden] on the draft's device), which the written samples hold anyway.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from inspector.draft import Draft
from inspector.errors import InputError, setting_field
from inspector.model.block import anchored_block_hidden, head_logits, selector_path
from inspector.serving.live_sequence import Decoding, Drafted, LiveSequence, SequenceSettings
from inspector.serving.sampling_settings import Sampling
from inspector.serving.spec import DraftSpec

if TYPE_CHECKING:  # capture loads transformers; only the loop itself needs it
    from inspector.capture.transformers_target import TargetModel


def check_block_live(draft: Draft, spec: DraftSpec, sampling: Sampling) -> None:
    """What the block loop runs: greedy, one chain of the spec's depth, no early stop; anything
    else is one line, before the target loads."""
    if draft.config.block is None:
        raise ValueError(f"{draft.name}: not a block draft")
    if not sampling.greedy:
        raise InputError(
            None, setting_field("temperature"), "the block live loop is greedy: drop it"
        )
    if not spec.is_chain:
        raise InputError(None, setting_field("topk"), "a block draft drafts one chain: topk 1")
    if spec.early_stop:
        raise InputError(None, setting_field("p-min"), "no early stop on a block draft's chain")


class BlockDecoding(Decoding):
    """One prompt's loop with a block draft: the target's side inherited, the draft's three
    methods replaced (the module docstring). `context` holds the wired features of the rows the
    draft has been fed, in fc block order, on the draft's device and dtype."""

    def _start_draft(self, feats: list[torch.Tensor]) -> None:
        block = self.draft.config.block
        assert block is not None
        self.block = block
        self.context: list[torch.Tensor] = [self._wired(feats)]

    def _wired(self, feats: list[torch.Tensor]) -> torch.Tensor:
        """Rows of the target's features at the wired slots, concatenated in fc block order, as
        the replay's `block_eval.context_of` converts a sample's."""
        parts = [feats[s] for s in self.s.wiring.slots]
        return torch.cat(parts, dim=-1).to(device=self.dev, dtype=self.draft.dtype)

    def _feed(self, committed: list[torch.Tensor], rows: torch.Tensor) -> None:
        self.context.append(self._wired(committed))

    def _draft(self, full: list[int], cap: int | None) -> Drafted:
        """The block after committed `full` (x_0..x_n) over the context rows 0..n-1, one chain of
        `spec.steps` drafted tokens (fewer where `cap` says)."""
        n = len(full) - 1
        ctx = torch.cat(self.context)
        if len(self.context) > 1:
            self.context = [ctx]  # one tensor kept, not one per round
        if ctx.shape[0] < n:
            raise AssertionError(f"the draft holds {ctx.shape[0]} context rows, the round {n}")
        k = self.s.spec.steps
        ids = torch.full((1, k + 1), self.block.mask_token_id, device=self.dev, dtype=torch.long)
        ids[0, 0] = full[n]
        anchors = torch.tensor([n], device=self.dev)
        normed = anchored_block_hidden(self.draft, ctx[:n], anchors, ids)[:, 1:]
        logits = head_logits(self.draft, normed)
        if self.block.family == "dflash2":
            pred = selector_path(self.draft, normed, logits, ids[:, 0])
        else:
            pred = logits.argmax(-1)
        m = k if cap is None else min(k, cap)
        tokens = pred[0, :m].tolist()
        return Drafted(
            tokens,
            list(range(-1, m - 1)),  # a chain: node j's parent is node j - 1
            torch.arange(1, m + 1),
            m,
            m if cap is not None and cap < k else k,
            None,
        )


def run_block_sequence(
    target: TargetModel,
    draft: Draft,
    prompt: list[int],
    settings: SequenceSettings,
    gen: torch.Generator | None = None,
) -> LiveSequence:
    """Speculative decoding of one prompt with a block draft (the module docstring); the same
    `LiveSequence` as the EAGLE loop's, so the report and the written samples are alike."""
    check_block_live(draft, settings.spec, settings.sampling)
    return BlockDecoding(target, draft, settings, gen).run(prompt)
