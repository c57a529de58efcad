"""The live loop: real speculative decoding of the draft against the transformers target, with the
same rounds, counts and JSON as the replay, and the realised sequences written as samples.

Per prompt and wiring, as the engines run it (EAGLE reference, SGLang, vLLM V1):

1. prefill: the target runs the prompt x_0..x_{P-1} (KV cache kept) and emits x_P (argmax, or a
   sample at the temperature); the draft's extend pairs fc(h_i) with embed(x_{i+1}) for
   i = 0..P-1, h_i the target's features at i;
2. each round after committed x_0..x_n: the draft proposes from its last committed row, n-1 (a
   chain for topk 1, the EAGLE-2/3 tree otherwise: `beam.build_trees`), its nodes run one beam
   level at a time, each attending to the committed rows and to its own ancestors only;
3. the target verifies the root x_n and the tree in one forward over its KV cache: a 4D ancestor
   mask, positions n + depth. Greedy: the longest path whose tokens equal the target's argmax;
   sampling: target-only verification (each drafted token treated as q = 1: a child is accepted
   with probability p_T(child), the rejected siblings' mass removed and the rest renormalised);
   the bonus token is the target's (argmax, or a sample of what is left);
4. the target's KV cache keeps the root and the accepted path; the draft's extend runs over the
   a + 1 newly committed positions with the target features of *that verify forward* (never the
   draft's own states), paired with the accepted tokens and the bonus;
5. a round emits a + 1 tokens; generation stops after `max_new` tokens (x_P included) or after
   the target's EOS (kept), truncating the last round's output there. Its *count* is not cut:
   the engines record the whole accepted path before the stop trims the output (vLLM's
   num_accepted, SGLang's accept_lens), so a is the path's length; under SGLang's convention one
   more round runs after the stop (its overlap scheduler) and is counted too.

The draft chooses its tokens deterministically (top-K of its softmax, mapped by d2t) and sits at
RoPE position row + `position_offset`, the evaluator's convention, so the replay of the written
samples computes the very same trees.

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

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from inspector.draft import Draft
from inspector.errors import InputError
from inspector.formats.sample_set import SkippedSample
from inspector.formats.samples import v1_slot_info
from inspector.model import (
    fc_wired,
)
from inspector.progress import Progress
from inspector.sample import SlotInfo
from inspector.serving.engines import Engine, default_engine
from inspector.serving.live_draft import LiveDraft
from inspector.serving.replay import AcceptReport, SampleReplay, WiringAccept
from inspector.serving.spec import DraftSpec
from inspector.serving.verify import trim_cache, verify_tree
from inspector.wiring import Wiring, named_label, parse_wiring, preset_name

if TYPE_CHECKING:  # capture loads transformers; only the loop itself needs it
    from inspector.capture.plan import DraftIds
    from inspector.capture.run import Prepared
    from inspector.capture.target import TargetModel


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


def run_sequence(
    target: TargetModel,
    draft: Draft,
    spec: DraftSpec,
    wiring: Wiring,
    plan_slots: tuple,
    prompt: list[int],
    *,
    max_new: int,
    temperature: float = 0.0,
    gen: torch.Generator | None = None,
    eos: Sequence[int] = (),
    position_offset: int = 1,
    engine: Engine = Engine.VLLM,
) -> LiveSequence:
    """Speculative decoding of one prompt (see the module docstring). `plan_slots`: the slots
    the target returns (capture's plan), in file order. `engine`: SGLang runs one more round
    after the stop (its overlap scheduler), counted but emitting nothing."""
    dev = draft.device
    eos_set = set(eos)
    p_len = len(prompt)

    def pick(row: torch.Tensor) -> int:
        row = row.float().cpu()
        if temperature == 0:
            return int(row.argmax())
        return int(torch.multinomial(torch.softmax(row / temperature, -1), 1, generator=gen))

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

    def one_round(full: list[int]) -> tuple[list[int], list[int], list[torch.Tensor]]:
        """Draft after `full`, verify, keep the accepted path: (path tokens, new tokens: the
        path and the bonus, the committed rows' features)."""
        nonlocal cache
        n = len(full) - 1
        tr = ld.tree()
        tokens = d2t[tr.tokens[0]].tolist()
        parent = tr.parent[0].tolist()
        m = len(tokens)
        # The tree's ancestor mask (root column always on) and positions n + depth.
        anc = torch.zeros(m + 1, m + 1, dtype=torch.bool)
        anc[0, 0] = True
        for j, par in enumerate(parent):
            anc[j + 1] = anc[par + 1]
            anc[j + 1, j + 1] = True
        mask = torch.cat([torch.ones(m + 1, n, dtype=torch.bool), anc], 1)
        pos = n + torch.cat([torch.zeros(1, dtype=torch.long), tr.depth[0].cpu()])
        logits, f, cache = target.forward_cached(
            torch.tensor([full[n], *tokens]), plan_slots, cache=cache, positions=pos, mask=mask
        )
        path, bonus = verify_tree(logits, tokens, parent, temperature, gen)
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
        path, new, committed = one_round(seq)
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
    )


def draft_ids(draft: Draft) -> DraftIds:
    """A loaded draft's aux ids as capture's plan reads them from its folder."""
    from inspector.capture.plan import DraftIds

    folder = Path(draft.path) if draft.path else Path(".")
    return DraftIds(
        folder,
        draft.config.aux_layer_ids,
        draft.config.aux_layer_convention,
        draft.config.num_fc_blocks,
        folder / "config.json",
    )


def live_folder(out: str | Path, wiring_text: str | Sequence[int], wiring: Wiring) -> Path:
    """Where a wiring's realised sequences go under `out`: a preset by its name ("train",
    "serve"), any other wiring by its slots ("wiring-0-1-2")."""
    name = preset_name(wiring_text)
    if name is not None:
        return Path(out) / name
    return Path(out) / ("wiring-" + "-".join(map(str, wiring.slots)))


def _live_config(
    prep: Prepared,
    input: str | Path,
    key: str,
    spec: DraftSpec,
    wiring: Wiring,
    n: int,
    complete: bool,
) -> dict:
    """capture's data_config.json for the loop's samples, keyed by the loop's settings too."""
    from inspector.capture.run import data_config

    cfg = data_config(prep, input, complete)
    cfg["format"]["num_samples"] = n
    cfg["capture"]["key"] = key
    s = prep.settings
    cfg["live"] = {
        "spec": spec.to_dict(),
        "wiring": list(wiring.slots),
        "temperature": s.temperature,
        "seed": s.seed,
        "features": "the prefill's and the verify forwards' states: what the loop fed its draft",
    }
    return cfg


def live_accept(
    draft: Draft,
    target: str | Path,
    input: str | Path,
    spec: DraftSpec,
    wirings: Sequence[str | Sequence[int]] = ("train",),
    *,
    max_new: int,
    temperature: float = 0.0,
    seed: int = 0,
    out: str | Path | None = None,
    target_dtype: str = "auto",
    names: Sequence[str | None] | None = None,
    limit: int | None = None,
    engine: Engine | None = None,
    progress: Progress | None = None,
) -> AcceptReport:
    """Run speculative decoding of `draft` against `target` over INPUT's prompts (capture's forms:
    a record's prompt is what precedes its first loss-masked token; an `{"input_ids"}` line
    without a mask is all prompt) and report its rounds per wiring, mode "live".

    draft: loaded with the target (its embedding), on the device and dtype to run; the target
      loads in `target_dtype` (capture's --dtype) on the draft's device.
    wirings: presets or explicit forms (`parse_wiring`) over the slots capture's plan gives this
      draft (its configured ids + the target's last pre-norm state).
    names: each wiring's name in the report (None: a preset's own name, else none).
    max_new: tokens generated per prompt, the prefill's x_P included; stops early after EOS.
    temperature: 0 greedy; else sampled, target-only verification, a CPU generator per prompt
      seeded from `seed` and the prompt's index as capture --generate seeds it.
    out: a folder per wiring (`live_folder`) receives the realised sequences as capture-format
      samples (same slots, loss mask from x_P on, the features the loop fed its draft), each with
      the target's continuation past its stop that the last round's count read.
    engine: whose counting (None: vLLM for a chain, SGLang for a tree); SGLang runs one more
      round after each request's stop.
    """
    engine = engine if engine is not None else default_engine(spec.is_chain)
    from inspector.capture import store
    from inspector.capture.run import CaptureSettings, prepare
    from inspector.capture.target import TargetModel

    if max_new < 1:
        raise InputError(None, "--max-new", f"{max_new}: at least 1 (the prefill's token)")
    windowed = [i for i in range(draft.config.num_layers) if draft.config.sliding_window(i)]
    if windowed:
        raise InputError(
            Path(draft.path) / "config.json" if draft.path else None,
            "sliding_window",
            f"draft layer {windowed[0]} has a sliding window: the live loop does not model one "
            "(the replay does)",
        )
    if temperature < 0:
        raise InputError(None, "--temperature", "must be >= 0")
    ids = draft_ids(draft)
    settings = CaptureSettings(
        layers=None,
        draft=draft.path or None,
        generate=max_new,
        temperature=temperature,
        seed=seed,
        dtype=target_dtype,
        device=str(draft.device),
        save_dtype="float32",  # replaced by the target's own dtype once it is loaded
    )
    prep = prepare(target, input, settings, draft_ids=ids)
    plan = prep.plan
    infos: list[SlotInfo] = v1_slot_info([None if s == "post-norm" else s for s in plan.slots])
    n_blocks = draft.config.num_fc_blocks
    parsed = [parse_wiring(w, infos, n_blocks) for w in wirings]
    folders: list[Path | None] = [None] * len(parsed)
    if out is not None:
        folders = [live_folder(out, t, w) for t, w in zip(wirings, parsed, strict=True)]
        if len(set(folders)) != len(folders):
            raise InputError(None, "--wiring", "the same wiring twice")
    keys = [
        hashlib.sha256(
            json.dumps(
                {
                    "capture": prep.key,
                    "draft": str(Path(draft.path).resolve()) if draft.path else None,
                    "spec": spec.to_dict(),
                    "wiring": list(w.slots),
                    "engine": engine.value,
                },
                sort_keys=True,
            ).encode()
        ).hexdigest()
        for w in parsed
    ]
    for fold, key in zip(folders, keys, strict=True):
        if fold is not None:  # before the weights load: a wrong folder fails at once
            store.check_output(fold, key)
    records = prep.records if limit is None else prep.records[:limit]
    model = TargetModel(prep.target, dtype=target_dtype, device=settings.device)
    save_dtype = str(model.dtype).replace("torch.", "")
    prep = replace(prep, settings=replace(settings, save_dtype=save_dtype))
    cut = prep.max_length - max_new - spec.steps  # the deepest verified position must fit
    eos = prep.info.eos_ids

    names = names or [preset_name(text) for text in wirings]
    results = [
        WiringAccept(w, named_label(w, infos, nm), spec.steps, name=nm)
        for w, nm in zip(parsed, names, strict=True)
    ]
    skipped: list[SkippedSample] = []
    done = 0
    for w, wa, fold, key in zip(parsed, results, folders, keys, strict=True):
        if fold is not None:
            fold.mkdir(parents=True, exist_ok=True)
            # the marker first, as capture writes it: an interrupted run leaves a folder that a
            # rerun with the same settings may overwrite, and nobody else's
            store.write_config(fold, _live_config(prep, input, key, spec, w, len(records), False))
        lengths: dict[int, int] = {}
        for i, r in enumerate(records):
            prompt = r.prompt[:cut]
            try:
                if not prompt:
                    raise InputError(r.where, None, "no prompt token before the generated part")
                gen = torch.Generator().manual_seed((seed * 1_000_003 + i) % (1 << 62))
                with torch.inference_mode():
                    seq = run_sequence(
                        model,
                        draft,
                        spec,
                        w,
                        plan.slots,
                        prompt,
                        max_new=max_new,
                        temperature=temperature,
                        gen=gen,
                        eos=eos,
                        engine=engine,
                    )
                if len(seq.ids) < 3:
                    raise InputError(r.where, None, f"{len(seq.ids)} tokens after generation")
            except InputError as e:
                if w is parsed[0]:  # the same prompt fails under every wiring: report it once
                    skipped.append(SkippedSample.from_error(i, r.where, e))
                done += 1
                if progress is not None:
                    progress(done, len(records) * len(parsed))
                continue
            path = r.where
            if fold is not None:
                mask = [0] * seq.prompt_len + [1] * (len(seq.ids) - seq.prompt_len)
                cont = (torch.tensor(seq.tail, dtype=torch.long), seq.tail_slots, seq.finish)
                store.write_sample(
                    fold, i, torch.tensor(seq.ids), seq.slots, torch.tensor(mask), cont
                )
                lengths[i] = len(seq.ids)
                path = str(store.sample_path(fold, i))
            a_by_start = np.full(len(seq.ids) + len(seq.tail), -1, dtype=np.int64)
            a_by_start[seq.starts] = seq.accepted
            wa.per_sample.append(
                SampleReplay(
                    i,
                    path,
                    np.array(seq.starts, dtype=np.int64),
                    np.array(seq.accepted, dtype=np.int64),
                    np.array(seq.emitted, dtype=np.int64),
                    a_by_start,
                    spec.steps,
                    after_stop=np.array(seq.after_stop, dtype=bool),
                    completion_tokens=len(seq.ids) - seq.prompt_len,
                )
            )
            done += 1
            if progress is not None:
                progress(done, len(records) * len(parsed))
        if fold is not None:
            store.write_lengths(fold, lengths)
            store.write_config(fold, _live_config(prep, input, key, spec, w, len(records), True))
    n_samples = len({s.index for wa in results for s in wa.per_sample})
    return AcceptReport(
        spec=spec,
        mode="live",
        checkpoint=draft.path,
        samples=n_samples,
        device=str(draft.device),
        dtype=str(draft.dtype).replace("torch.", ""),
        slots=infos,
        wirings=results,
        skipped=skipped,
        verifier=str(target),
        engine=engine,
    )
