"""The live loop: real speculative decoding of the draft against the transformers target, with the
same rounds, counts and JSON as the replay, and the realised sequences written as samples.

One prompt's rounds are `live_sequence.run_sequence` (its docstring has the protocol and what
the written samples hold); this module runs it over a capture INPUT's prompts per wiring,
writes the folders and reports like the replay, mode "live".
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from inspector.draft import Draft
from inspector.engines import Engine, default_engine
from inspector.errors import InputError, setting_field
from inspector.formats.sample_set import SkippedSample
from inspector.formats.samples import v1_slot_info
from inspector.progress import Progress
from inspector.sample import SlotInfo
from inspector.serving.expectation import SampleOdds
from inspector.serving.live_sequence import run_sequence
from inspector.serving.replay import AcceptReport, SampleReplay, WiringAccept
from inspector.serving.sampling_settings import (
    Sampling,
    SamplingSettings,
    Verification,
    default_rule,
)
from inspector.serving.spec import DraftSpec
from inspector.wiring import Wiring, configured_layers, named_label, parse_wiring, preset_name

if TYPE_CHECKING:  # capture loads transformers; only the loop itself needs it
    from inspector.capture.plan import DraftIds
    from inspector.capture.run import Prepared
    from inspector.capture.transformers_target import TargetModel


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
    settings: SamplingSettings,
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
        "sampling": settings.to_dict(),
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
    top_k: int = 0,
    top_p: float = 1.0,
    verification: Verification | None = None,
    seed: int = 0,
    out: str | Path | None = None,
    target_dtype: str = "auto",
    names: Sequence[str | None] | None = None,
    limit: int | None = None,
    engine: Engine | None = None,
    progress: Progress | None = None,
    layers: str | None = None,
    model: TargetModel | None = None,
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
    temperature, top_k, top_p: the requests' sampling (`sampling.Sampling`); temperature 0 is
      greedy. Sampled, a CPU generator per prompt is seeded from `seed` and the prompt's index as
      capture --generate seeds it, and every round records its acceptance odds under the rule.
    verification: the engine's rule at a temperature (None: the engine's default, target-only;
      the sampled-draft rules draw the chain from the draft's q).
    out: a folder per wiring (`live_folder`) receives the realised sequences as capture-format
      samples (same slots, loss mask from x_P on, the features the loop fed its draft), each with
      the target's continuation past its stop that the last round's count read.
    engine: whose counting (None: vLLM for a chain, SGLang for a tree); SGLang runs one more
      round after each request's stop.
    layers: the slots to capture (capture's --layers; None: the draft's configured ids and the
      target's last state). Wider than the wiring needs when the realised sequences under `out`
      are to be searched for the trained wiring (`reconcile --prompts`).
    model: the target, already loaded in `target_dtype` on the draft's device (a caller running
      the loop more than once loads it once); None: loaded here.
    """
    engine = engine if engine is not None else default_engine(spec.is_chain)
    from inspector.capture import store
    from inspector.capture.run import CaptureSettings, prepare
    from inspector.capture.transformers_target import TargetModel

    if max_new < 1:
        raise InputError(
            None, setting_field("max-new"), f"{max_new}: at least 1 (the prefill's token)"
        )
    windowed = [i for i in range(draft.config.num_layers) if draft.config.sliding_window(i)]
    if windowed:
        raise InputError(
            Path(draft.path) / "config.json" if draft.path else None,
            "sliding_window",
            f"draft layer {windowed[0]} has a sliding window: the live loop does not model one "
            "(the replay does)",
        )
    sampling = Sampling(temperature, top_k, top_p)
    if verification is None:
        verification = Verification(default_rule(engine.value))
    if verification.rule.engine != engine.value:
        raise InputError(
            None,
            setting_field("verify"),
            f"{verification.rule.value} is not {engine.display}'s rule",
        )
    verification.check_tree(spec.is_chain)
    if spec.early_stop and not sampling.greedy and verification.rule.samples_drafts:
        raise InputError(
            None,
            setting_field("p-min"),
            "llama.cpp's early stop reads a greedy draft: not a sampled-draft rule",
        )
    settings_s = SamplingSettings(sampling, verification)
    ids = draft_ids(draft)
    settings = CaptureSettings(
        layers=layers,
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
    cfg = draft.config
    layers = configured_layers(cfg.aux_layer_ids, cfg.aux_layer_convention)
    parsed = [parse_wiring(w, infos, n_blocks, layers) for w in wirings]
    folders: list[Path | None] = [None] * len(parsed)
    if out is not None:
        folders = [live_folder(out, t, w) for t, w in zip(wirings, parsed, strict=True)]
        if len(set(folders)) != len(folders):
            raise InputError(None, setting_field("wiring"), "the same wiring twice")
    keys = [
        hashlib.sha256(
            json.dumps(
                {
                    "capture": prep.key,
                    "draft": str(Path(draft.path).resolve()) if draft.path else None,
                    "spec": spec.to_dict(),
                    "wiring": list(w.slots),
                    "engine": engine.value,
                    "sampling": settings_s.to_dict(),
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
    if model is None:
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
            store.write_config(
                fold, _live_config(prep, input, key, spec, w, len(records), False, settings_s)
            )
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
                        sampling=sampling,
                        verification=verification,
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
                    fold,
                    i,
                    torch.tensor(seq.ids),
                    seq.slots,
                    torch.tensor(mask),
                    cont,
                    category=r.category,
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
                    drafted=(
                        np.array(seq.drafted, dtype=np.int64)
                        if spec.early_stop or any(d != spec.steps for d in seq.drafted)
                        else None
                    ),
                    completion_tokens=len(seq.ids) - seq.prompt_len,
                    odds=None if sampling.greedy else SampleOdds.of(seq.odds, spec.steps),
                    category=r.category,
                )
            )
            done += 1
            if progress is not None:
                progress(done, len(records) * len(parsed))
        if fold is not None:
            store.write_lengths(fold, lengths)
            store.write_config(
                fold, _live_config(prep, input, key, spec, w, len(records), True, settings_s)
            )
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
        sampling=None if sampling.greedy else settings_s,
    )
