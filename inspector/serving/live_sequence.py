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


@dataclass
class LiveSequence:
    """One prompt's loop: the realised tokens, the features fed (per slot, [T, H] on the CPU),
    the rounds (each round's accepted count as the engine counts it: the whole matched path,
    also past the stop; the tokens it emitted, cut at the stop), and the target's continuation
    past the stop that those counts read (tokens and slots, [C, H])."""

    ids: list[int]
    prompt_len: int
    slots: list[torch.Tensor]
    starts: list[int]
    accepted: list[int]
    emitted: list[int]
    after_stop: list[bool]
    tail: list[int]
    tail_slots: list[torch.Tensor]
    finish: str  # "stop" (EOS) or "length"
    odds: list[RoundOdds]  # at a temperature: each round's odds under the rule, given its start
    drafted: list[int]  # each round's draft steps (fewer than steps: llama.cpp's early stop)


def run_sequence(
    target: TargetModel,
    draft: Draft,
    spec: DraftSpec,
    wiring: Wiring,
    plan_slots: tuple,
    prompt: list[int],
    *,
    max_new: int,
    sampling: Sampling = GREEDY,
    verification: Verification = ONE_HOT,
    gen: torch.Generator | None = None,
    eos: Sequence[int] = (),
    position_offset: int = 1,
    engine: Engine = Engine.VLLM,
) -> LiveSequence:
    """Speculative decoding of one prompt (see the module docstring). `plan_slots`: the slots
    the target returns (capture's plan), in file order. `sampling`, `verification`: the
    request's settings and the engine's rule at a temperature (`sampling`). `engine`: SGLang
    runs one more round after the stop (its overlap scheduler), counted but emitting nothing."""
    dev = draft.device
    eos_set = set(eos)
    p_len = len(prompt)
    uniform, categorical = torch_draws(gen)
    sampled_drafts = not sampling.greedy and verification.rule.samples_drafts

    def pick(row: torch.Tensor) -> int:
        row = row.float().cpu()
        if sampling.greedy:
            return int(row.argmax())
        return categorical(target_probs(row, sampling))

    def fc_of(feats: list[torch.Tensor]) -> torch.Tensor:
        # the evaluator's conversion of stored slots: to the draft's device and dtype
        return fc_wired(draft, [feats[s].to(dev, draft.dtype) for s in wiring.slots])

    logits, f, cache = target.forward_cached(torch.tensor(prompt), plan_slots)
    parts: list[list[torch.Tensor]] = [[x.cpu()] for x in f]
    seq = [*prompt, pick(logits[-1])]
    ld = LiveDraft(draft, spec, position_offset)
    ld.extend(fc_of([x.cpu() for x in f]), torch.tensor(seq[1:], device=dev))
    d2t = ld.d2t
    starts: list[int] = []
    accepted: list[int] = []
    emitted: list[int] = []
    after_stop: list[bool] = []
    odds: list[RoundOdds] = []
    drafted: list[int] = []

    def one_round(
        full: list[int], cap: int | None = None
    ) -> tuple[list[int], list[int], list[torch.Tensor]]:
        """Draft after `full`, verify, keep the accepted path: (path tokens, new tokens: the
        path and the bonus, the committed rows' features); its drafted count to `drafted`.
        `cap`: at most this many drafted tokens (llama-server's room left, a chain's prefix)."""
        nonlocal cache
        n = len(full) - 1
        q_draft = None
        if sampled_drafts:
            tr, q_draft = ld.sampled_chain(sampling.temperature, categorical)
        else:
            tr = ld.tree()
        # the nodes verified: every one, or the prefix of the chain llama.cpp's drafter keeps
        m = ld.kept() if spec.early_stop else len(tr.tokens[0])
        if cap is not None and cap < m:
            m = cap
            drafted.append(m)
        else:
            drafted.append(m if spec.early_stop else spec.steps)
        tokens = d2t[tr.tokens[0][:m]].tolist()
        parent = tr.parent[0][:m].tolist()
        # The tree's ancestor mask (root column always on) and positions n + depth.
        anc = torch.zeros(m + 1, m + 1, dtype=torch.bool)
        anc[0, 0] = True
        for j, par in enumerate(parent):
            anc[j + 1] = anc[par + 1]
            anc[j + 1, j + 1] = True
        mask = torch.cat([torch.ones(m + 1, n, dtype=torch.bool), anc], 1)
        pos = n + torch.cat([torch.zeros(1, dtype=torch.long), tr.depth[0][:m].cpu()])
        logits, f, cache = target.forward_cached(
            torch.tensor([full[n], *tokens]), plan_slots, cache=cache, positions=pos, mask=mask
        )
        if sampling.greedy:  # nothing random: the odds are the count (the report keeps none)
            path, bonus = verify_tree(logits, tokens, parent)
        else:
            probs = target_probs(logits.cpu(), sampling)
            q = None
            if q_draft is not None:  # over the target's vocabulary: the draft's ids by d2t
                q = torch.zeros(q_draft.shape[0], probs.shape[-1], dtype=torch.float64)
                q[:, d2t.cpu()] = q_draft
            q_at = None if q is None else q[torch.arange(m), torch.tensor(tokens)].tolist()
            reach = node_reach(probs, tokens, parent, verification, q_at)
            odds.append(RoundOdds.of(reach, tr.depth[0][:m].tolist(), spec.steps))
            path, bonus = sample_verify(
                probs, tokens, parent, verification, uniform, categorical, q
            )
        keep = [0, *(1 + j for j in path)]
        trim_cache(cache, torch.cat([torch.arange(n), n + torch.tensor(keep)]))
        sel = torch.tensor(keep, device=f[0].device)
        committed = [x.index_select(0, sel).cpu() for x in f]
        for s, x in enumerate(committed):
            parts[s].append(x)
        path_tokens = [tokens[j] for j in path]
        return path_tokens, [*path_tokens, bonus], committed

    full = list(seq)  # what the engine holds: the whole accepted path and bonus, uncut
    room_before = 0
    while len(seq) - p_len < max_new and seq[-1] not in eos_set:
        n = len(seq) - 1
        room_before = max_new - (len(seq) - p_len)
        # llama-server drafts at most the room left less the bonus; with none left the last
        # token is a plain decode, no round (tools/server/server-context.cpp)
        cap = room_before - 1 if engine.caps_at_remaining else None
        if cap is not None and cap <= 0:
            logits, f, cache = target.forward_cached(
                torch.tensor([seq[n]]), plan_slots, cache=cache, positions=torch.tensor([n])
            )
            for s, x in enumerate(f):
                parts[s].append(x.cpu())
            seq.append(pick(logits[-1]))
            full = list(seq)
            break
        path, new, committed = one_round(seq, cap)
        stop = next((i + 1 for i, t in enumerate(new) if t in eos_set), len(new))
        out = new[: min(room_before, stop)]
        full = seq + new
        seq += out
        starts.append(n)
        accepted.append(len(path))  # the engines count the whole path, also past the stop
        emitted.append(len(out))
        after_stop.append(False)
        if len(seq) - p_len < max_new and seq[-1] not in eos_set:
            ld.extend(fc_of(committed), torch.tensor(seq[n + 1 : n + len(new) + 1], device=dev))
    finish = "stop" if seq[-1] in eos_set else "length"
    if engine.overlap_round and (finish == "stop" or (starts and room_before > 1)):
        # SGLang launched the next round before this one's result was read: it drafts after
        # the whole path and bonus and is counted, though the request has stopped (an EOS from
        # the prefill too: the draft then holds the prompt's rows already)
        if starts:
            n = starts[-1]
            ld.extend(fc_of(committed), torch.tensor(full[n + 1 :], device=dev))
        n2 = len(full) - 1
        path, new, _ = one_round(full)
        full = full + new
        starts.append(n2)
        accepted.append(len(path))
        emitted.append(0)
        after_stop.append(True)
    have = sum(x.shape[0] for x in parts[0])
    if have < len(full):
        # tokens never verified (the last bonus): one more forward gives their features (they
        # feed no round of the replay either: a round after x_n reads rows up to n-1)
        _, f, _ = target.forward_cached(torch.tensor(full[have:]), plan_slots, cache=cache)
        for s, x in enumerate(f):
            parts[s].append(x.cpu())
    every = [torch.cat(p)[: len(full)] for p in parts]
    slots = [x[: len(seq)].clone() for x in every]
    tail_slots = [x[len(seq) :].clone() for x in every]
    return LiveSequence(
        seq,
        p_len,
        slots,
        starts,
        accepted,
        emitted,
        after_stop,
        full[len(seq) :],
        tail_slots,
        finish,
        odds,
        drafted,
    )
