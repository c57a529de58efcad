"""The live loop's one sequence: real speculative decoding of one prompt against the
transformers target, round by round.

Per prompt and wiring, as the engines run it (EAGLE reference, SGLang, vLLM V1):

1. prefill: the target runs the prompt x_0..x_{P-1} (KV cache kept) and emits x_P (argmax, or a
   sample at the temperature); the draft's extend pairs fc(h_i) with embed(x_{i+1}) for
   i = 0..P-1, h_i the target's features at i;
2. each round after committed x_0..x_n: the draft proposes from its last committed row, n-1 (a
   chain for topk 1, the EAGLE-2/3 tree otherwise: `beam.build_trees`), its nodes run one beam
   level at a time, each attending to the committed rows and to its own ancestors only;
3. the target verifies the root x_n and the tree in one forward over its KV cache: a 4D ancestor
   mask, positions n + depth. Greedy: the longest path whose tokens equal the target's argmax;
   at a temperature: the engine's rule (`sampling`: vLLM's one-hot or SGLang's target-only by
   default, each drafted token treated as q = 1, accepted with probability p_T(child) under
   the request's temperature / top-k / top-p) and the round's exact acceptance odds given its
   start (`sampling.node_reach`), which `expectation` pools; the bonus token is the target's
   (argmax, or a sample of what is left);
4. the target's KV cache keeps the root and the accepted path; the draft's extend runs over the
   a + 1 newly committed positions with the target features of *that verify forward* (never the
   draft's own states), paired with the accepted tokens and the bonus;
   Under llama.cpp's early stop (`DraftSpec.p_min` / `n_min`) a chain is cut where its drafter
   stops (`LiveDraft.kept`): the target verifies only the tokens kept (none: the root alone),
   and each round's drafted count is recorded;
5. a round emits a + 1 tokens; generation stops after `max_new` tokens (x_P included) or after
   the target's EOS (kept), truncating the last round's output there. Its *count* is not cut:
   the engines record the whole accepted path before the stop trims the output (vLLM's
   num_accepted, SGLang's accept_lens), so a is the path's length; under SGLang's convention one
   more round runs after the stop (its overlap scheduler) and is counted too.

The draft chooses its tokens deterministically (top-K of its softmax, mapped by d2t) and sits at
RoPE position row + `position_offset`, the evaluator's convention, so the replay of the written
samples computes the very same trees. Under the sampled-draft rules (vLLM's probabilistic
drafting, SGLang's rejection sampling) the chain is drawn from the draft's q instead, and the
replay of those sequences, which drafts deterministically, measures another process.

What the samples hold: the realised tokens (loss mask on x_P and after) and, as features, exactly
what the loop fed the draft: the prefill's and the verify forwards' states (the target's dtype,
unrounded), the last token's from one more forward. A recapture by a full forward would differ
from them by float rounding (another batch shape), enough to flip a near-tied draft ranking; with
the loop's own features the replay of each round equals the loop's, exactly (greedy and sampled:
the bonus of a round is never one of the children tried at its node, so the realised sequence
stops matching the tree exactly where verification stopped). Each wiring runs its own loop (its
tree decides which target states get computed), so each gets its own folder.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from inspector.draft import Draft
from inspector.engines import Engine
from inspector.model import fc_wired
from inspector.serving.live_draft import LiveDraft
from inspector.serving.sampling import (
    RoundOdds,
    node_reach,
    sample_verify,
    target_probs,
    torch_draws,
)
from inspector.serving.sampling_settings import Sampling, Verification
from inspector.serving.spec import DraftSpec
from inspector.serving.verify import trim_cache, verify_tree
from inspector.wiring import Wiring

GREEDY = Sampling()
ONE_HOT = Verification()

if TYPE_CHECKING:  # capture loads transformers; only the loop itself needs it
    from inspector.capture.transformers_target import TargetModel


@dataclass(frozen=True)
class LiveRound:
    """One round as the engine counts it: the last committed row it drafts after (`start`), the
    accepted path's length (the whole path, also past the stop), the tokens it emitted (cut at
    the stop), whether it ran after the stop (SGLang's overlap round), its draft steps (fewer
    than steps: llama.cpp's early stop or the room left) and, at a temperature, its odds under
    the rule given its start."""

    start: int
    accepted: int
    emitted: int
    after_stop: bool
    drafted: int
    odds: RoundOdds | None = None


@dataclass
class LiveSequence:
    """One prompt's loop: the realised tokens, the features fed (per slot, [T, H] on the CPU),
    its rounds, and the target's continuation past the stop that the rounds' counts read
    (tokens and slots, [C, H])."""

    ids: list[int]
    prompt_len: int
    slots: list[torch.Tensor]
    rounds: list[LiveRound]
    tail: list[int]
    tail_slots: list[torch.Tensor]
    finish: str  # "stop" (EOS) or "length"


@dataclass(frozen=True)
class SequenceSettings:
    """How one prompt's loop runs: the draft's shape, the wiring that feeds it, the slots the
    target returns (capture's plan, in file order), the tokens to generate, the request's
    sampling and the engine's rule at a temperature (`sampling`), the stop tokens, the draft's
    RoPE offset and the engine (SGLang runs one more round after the stop, its overlap
    scheduler, counted but emitting nothing; llama-server drafts at most the room left)."""

    spec: DraftSpec
    wiring: Wiring
    plan_slots: tuple
    max_new: int
    sampling: Sampling = GREEDY
    verification: Verification = ONE_HOT
    eos: Sequence[int] = ()
    position_offset: int = 1
    engine: Engine = Engine.VLLM


def run_sequence(
    target: TargetModel,
    draft: Draft,
    prompt: list[int],
    settings: SequenceSettings,
    gen: torch.Generator | None = None,
) -> LiveSequence:
    """Speculative decoding of one prompt (see the module docstring): the prefill, the rounds,
    SGLang's round after the stop, then the features of what no round verified. `gen`: the
    CPU generator of the draws at a temperature."""
    return Decoding(target, draft, settings, gen).run(prompt)


@dataclass(frozen=True)
class Drafted:
    """A round's draft as the target verifies it: the kept nodes' tokens (target vocabulary),
    their parents and depths, the count recorded as drafted, and (sampled drafts) the draft's q
    per node."""

    tokens: list[int]
    parent: list[int]
    depth: torch.Tensor
    kept: int
    drafted: int
    q_draft: torch.Tensor | None


@dataclass(frozen=True)
class _Verified:
    """A verified round: the accepted path's tokens, the new tokens (the path and the bonus), the
    committed rows' features, its drafted count and odds."""

    path: list[int]
    new: list[int]
    committed: list[torch.Tensor]
    drafted: int
    odds: RoundOdds | None


class Decoding:
    """One prompt's loop in progress: the target's KV cache and the features it returned per slot,
    the draft's own cache (`LiveDraft`), the tokens so far and the rounds; each method is one step
    of the protocol in the module docstring. The draft's side is three methods (`_start_draft`,
    `_feed`, `_draft`), so a block draft's loop (`live_block`) runs the same target side."""

    def __init__(
        self,
        target: TargetModel,
        draft: Draft,
        settings: SequenceSettings,
        gen: torch.Generator | None,
    ) -> None:
        self.target, self.draft, self.s = target, draft, settings
        self.dev = draft.device
        self.eos = set(settings.eos)
        self.uniform, self.categorical = torch_draws(gen)
        self.sampled_drafts = (
            not settings.sampling.greedy and settings.verification.rule.samples_drafts
        )
        self.rounds: list[LiveRound] = []
        self.room_before = 0
        self.last_committed: list[torch.Tensor] = []

    def run(self, prompt: list[int]) -> LiveSequence:
        """The whole protocol: the prefill, the rounds, SGLang's round after the stop, then the
        features of what no round verified."""
        self.prefill(prompt)
        self.run_rounds()
        finish = "stop" if self.seq[-1] in self.eos else "length"
        self.overlap_round(finish)
        return self.sequence(finish)

    def pick(self, row: torch.Tensor) -> int:
        """The target's token at a row: its argmax, or a sample at the request's settings."""
        row = row.float().cpu()
        if self.s.sampling.greedy:
            return int(row.argmax())
        return self.categorical(target_probs(row, self.s.sampling))

    def fc_of(self, feats: list[torch.Tensor]) -> torch.Tensor:
        """The draft's fc over the wired slots of target features."""
        # the evaluator's conversion of stored slots: to the draft's device and dtype
        dev, dtype = self.dev, self.draft.dtype
        return fc_wired(self.draft, [feats[s].to(dev, dtype) for s in self.s.wiring.slots])

    def prefill(self, prompt: list[int]) -> None:
        """Step 1: the target runs the prompt and emits x_P; the draft extends over the prompt's
        features paired with the next tokens."""
        self.p_len = len(prompt)
        logits, f, self.cache = self.target.forward_cached(torch.tensor(prompt), self.s.plan_slots)
        self.parts: list[list[torch.Tensor]] = [[x.cpu()] for x in f]
        self.seq = [*prompt, self.pick(logits[-1])]
        self._start_draft([x.cpu() for x in f])
        # what the engine holds: the whole accepted path and bonus, uncut
        self.full = list(self.seq)

    def _start_draft(self, feats: list[torch.Tensor]) -> None:
        """The draft's extend over the prompt's features (per slot) paired with the next tokens."""
        self.ld = LiveDraft(self.draft, self.s.spec, self.s.position_offset)
        self.ld.extend(self.fc_of(feats), torch.tensor(self.seq[1:], device=self.dev))
        self.d2t = self.ld.d2t

    def _feed(self, committed: list[torch.Tensor], rows: torch.Tensor) -> None:
        """Step 4's extend: the committed rows' features (of the verify forward), per slot, paired
        with `rows`, the tokens that follow them."""
        self.ld.extend(self.fc_of(committed), rows)

    def run_rounds(self) -> None:
        """Steps 2-5 until `max_new` tokens or the target's EOS."""
        max_new = self.s.max_new
        while len(self.seq) - self.p_len < max_new and self.seq[-1] not in self.eos:
            n = len(self.seq) - 1
            self.room_before = max_new - (len(self.seq) - self.p_len)
            # llama-server drafts at most the room left less the bonus; with none left the last
            # token is a plain decode, no round (tools/server/server-context.cpp)
            cap = self.room_before - 1 if self.s.engine.caps_at_remaining else None
            if cap is not None and cap <= 0:
                self._plain_decode(n)
                break
            self._round(n, cap)

    def _plain_decode(self, n: int) -> None:
        """The last token without a round: one target forward at row n."""
        logits, f, self.cache = self.target.forward_cached(
            torch.tensor([self.seq[n]]),
            self.s.plan_slots,
            cache=self.cache,
            positions=torch.tensor([n]),
        )
        for s, x in enumerate(f):
            self.parts[s].append(x.cpu())
        self.seq.append(self.pick(logits[-1]))
        self.full = list(self.seq)

    def _round(self, n: int, cap: int | None) -> None:
        """A round after committed x_0..x_n: emit what it accepted up to the stop, count the
        whole path, and extend the draft over the committed rows unless generation is done."""
        v = self._one_round(self.seq, cap)
        stop = next((i + 1 for i, t in enumerate(v.new) if t in self.eos), len(v.new))
        out = v.new[: min(self.room_before, stop)]
        self.full = self.seq + v.new
        self.seq += out
        # the engines count the whole path, also past the stop
        self.rounds.append(LiveRound(n, len(v.path), len(out), False, v.drafted, v.odds))
        self.last_committed = v.committed
        if len(self.seq) - self.p_len < self.s.max_new and self.seq[-1] not in self.eos:
            new_rows = torch.tensor(self.seq[n + 1 : n + len(v.new) + 1], device=self.dev)
            self._feed(v.committed, new_rows)

    def overlap_round(self, finish: str) -> None:
        """SGLang launched the next round before this one's result was read: it drafts after the
        whole path and bonus and is counted, though the request has stopped (an EOS from the
        prefill too: the draft then holds the prompt's rows already)."""
        if not self.s.engine.overlap_round:
            return
        if not (finish == "stop" or (self.rounds and self.room_before > 1)):
            return
        if self.rounds:
            n = self.rounds[-1].start
            self._feed(self.last_committed, torch.tensor(self.full[n + 1 :], device=self.dev))
        n2 = len(self.full) - 1
        v = self._one_round(self.full)
        self.full = self.full + v.new
        self.rounds.append(LiveRound(n2, len(v.path), 0, True, v.drafted, v.odds))

    def _one_round(self, full: list[int], cap: int | None = None) -> _Verified:
        """Draft after `full`, verify, keep the accepted path. `cap`: at most this many drafted
        tokens (llama-server's room left, a chain's prefix)."""
        n = len(full) - 1
        d = self._draft(full, cap)
        logits, f = self._verify(full, d)
        path, bonus, odds = self._accept(logits, d)
        committed = self._commit(n, path, f)
        path_tokens = [d.tokens[j] for j in path]
        return _Verified(path_tokens, [*path_tokens, bonus], committed, d.drafted, odds)

    def _draft(self, full: list[int], cap: int | None) -> Drafted:
        """Step 2: the draft's tree (or a chain drawn from its q) after `full`, cut to the nodes
        verified: every one, or the prefix of the chain llama.cpp's drafter keeps, at most `cap`.
        (The EAGLE draft's cache holds the rows already; `full` is what a block draft reads.)"""
        spec = self.s.spec
        q_draft = None
        if self.sampled_drafts:
            tr, q_draft = self.ld.sampled_chain(self.s.sampling.temperature, self.categorical)
        else:
            tr = self.ld.tree()
        m = self.ld.kept() if spec.early_stop else len(tr.tokens[0])
        if cap is not None and cap < m:
            m = cap
            drafted = m
        else:
            drafted = m if spec.early_stop else spec.steps
        tokens = self.d2t[tr.tokens[0][:m]].tolist()
        return Drafted(tokens, tr.parent[0][:m].tolist(), tr.depth[0][:m], m, drafted, q_draft)

    def _verify(self, full: list[int], d: Drafted) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Step 3's forward: the root x_n and the tree in one target forward over its KV cache,
        under the tree's ancestor mask (root column always on) at positions n + depth."""
        n, m = len(full) - 1, d.kept
        anc = torch.zeros(m + 1, m + 1, dtype=torch.bool)
        anc[0, 0] = True
        for j, par in enumerate(d.parent):
            anc[j + 1] = anc[par + 1]
            anc[j + 1, j + 1] = True
        mask = torch.cat([torch.ones(m + 1, n, dtype=torch.bool), anc], 1)
        pos = n + torch.cat([torch.zeros(1, dtype=torch.long), d.depth.cpu()])
        logits, f, self.cache = self.target.forward_cached(
            torch.tensor([full[n], *d.tokens]),
            self.s.plan_slots,
            cache=self.cache,
            positions=pos,
            mask=mask,
        )
        return logits, f

    def _accept(self, logits: torch.Tensor, d: Drafted) -> tuple[list[int], int, RoundOdds | None]:
        """Step 3's verdict: the longest path equal to the target's argmax (greedy), else the
        engine's rule, with the round's odds given its start; and the bonus token."""
        if self.s.sampling.greedy:  # nothing random: the odds are the count (the report keeps none)
            path, bonus = verify_tree(logits, d.tokens, d.parent)
            return path, bonus, None
        verification = self.s.verification
        probs = target_probs(logits.cpu(), self.s.sampling)
        q = None
        if d.q_draft is not None:  # over the target's vocabulary: the draft's ids by d2t
            q = torch.zeros(d.q_draft.shape[0], probs.shape[-1], dtype=torch.float64)
            q[:, self.d2t.cpu()] = d.q_draft
        q_at = None if q is None else q[torch.arange(d.kept), torch.tensor(d.tokens)].tolist()
        reach = node_reach(probs, d.tokens, d.parent, verification, q_at)
        odds = RoundOdds.of(reach, d.depth.tolist(), self.s.spec.steps)
        path, bonus = sample_verify(
            probs, d.tokens, d.parent, verification, self.uniform, self.categorical, q
        )
        return path, bonus, odds

    def _commit(self, n: int, path: list[int], f: list[torch.Tensor]) -> list[torch.Tensor]:
        """Step 4: the target's KV cache keeps the root and the accepted path; their features
        (of this verify forward) are kept for the samples and the draft's next extend."""
        keep = [0, *(1 + j for j in path)]
        trim_cache(self.cache, torch.cat([torch.arange(n), n + torch.tensor(keep)]))
        sel = torch.tensor(keep, device=f[0].device)
        committed = [x.index_select(0, sel).cpu() for x in f]
        for s, x in enumerate(committed):
            self.parts[s].append(x)
        return committed

    def sequence(self, finish: str) -> LiveSequence:
        """The realised sequence and its continuation, with the features of tokens no round
        verified (the last bonus) from one more forward: they feed no round of the replay
        either (a round after x_n reads rows up to n-1)."""
        have = sum(x.shape[0] for x in self.parts[0])
        if have < len(self.full):
            _, f, _ = self.target.forward_cached(
                torch.tensor(self.full[have:]), self.s.plan_slots, cache=self.cache
            )
            for s, x in enumerate(f):
                self.parts[s].append(x.cpu())
        every = [torch.cat(p)[: len(self.full)] for p in self.parts]
        n = len(self.seq)
        return LiveSequence(
            self.seq,
            self.p_len,
            [x[:n].clone() for x in every],
            self.rounds,
            self.full[n:],
            [x[n:].clone() for x in every],
            finish,
        )
