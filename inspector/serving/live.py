"""The live loop: real speculative decoding of the draft against the transformers target, with the
same rounds, counts and JSON as the replay, and the realised sequences written as samples.

One prompt's rounds are `live_sequence.run_sequence` (its docstring has the protocol and what
the written samples hold), or for a block draft (DFlash, DFlash2) `live_block.run_block_sequence`
(the same target side, a block a round); this module runs it over a capture INPUT's prompts per
wiring, writes the folders and reports like the replay, mode "live".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from inspector.draft import Draft
from inspector.engines import Engine, default_engine
from inspector.errors import InputError, setting_field
from inspector.formats.sample_set import SkippedSample
from inspector.formats.samples import v1_slot_info
from inspector.progress import Progress
from inspector.sample import SlotInfo
from inspector.serving.live_block import check_block_live, run_block_sequence
from inspector.serving.live_output import live_sample_replay, run_key, write_live_sample
from inspector.serving.live_sequence import LiveSequence, SequenceSettings, run_sequence
from inspector.serving.replay import AcceptReport, WiringAccept
from inspector.serving.sampling_settings import (
    Sampling,
    SamplingSettings,
    Verification,
    default_rule,
)
from inspector.serving.spec import DraftSpec
from inspector.wiring import Wiring, configured_layers, named_label, parse_wiring, preset_name

if TYPE_CHECKING:  # capture loads transformers; only the loop itself needs it
    from inspector.capture.inputs import Record
    from inspector.capture.plan import DraftIds, SlotPlan
    from inspector.capture.run import CaptureSettings, Prepared
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


def plan_infos(plan: SlotPlan) -> list[SlotInfo]:
    """The slots a capture plan gives, as the live loop (and `reconcile --prompts`) labels them."""
    return v1_slot_info([None if s == "post-norm" else s for s in plan.slots])


def open_live_draft(folder: str | Path, target: str | Path, *, dtype: str, device: str) -> Draft:
    """The draft of a live run: loaded from `folder` on `device` (auto, cpu, cuda:N) in `dtype`,
    with the target's head and embedding where it lacks them."""
    from inspector.evaluate import resolve_device
    from inspector.formats import load_draft

    return load_draft(folder, target=target, dtype=dtype, device=resolve_device(device))


def live_folder(out: str | Path, wiring_text: str | Sequence[int], wiring: Wiring) -> Path:
    """Where a wiring's realised sequences go under `out`: a preset by its name ("train",
    "serve"), any other wiring by its slots ("wiring-0-1-2")."""
    name = preset_name(wiring_text)
    if name is not None:
        return Path(out) / name
    return Path(out) / ("wiring-" + "-".join(map(str, wiring.slots)))


@dataclass(frozen=True)
class LiveSettings:
    """What a live run (`live_accept`) is asked for, as one value: each step reads the few fields
    it needs.

    spec: what the draft proposes each round (`DraftSpec`: a chain or a tree, its steps).
    max_new: tokens generated per prompt, the prefill's x_P included; stops early after EOS.
    wirings: presets or explicit forms (`parse_wiring`) over the slots capture's plan gives this
      draft (its configured ids + the target's last pre-norm state).
    temperature, top_k, top_p: the requests' sampling (`sampling.Sampling`); temperature 0 is
      greedy. Sampled, a CPU generator per prompt is seeded from `seed` and the prompt's index as
      capture --generate seeds it, and every round records its acceptance odds under the rule.
    verification: the engine's rule at a temperature (None: the engine's default, target-only;
      the sampled-draft rules draw the chain from the draft's q).
    seed: what the sampled run's generators are seeded from (above).
    out: a folder per wiring (`live_folder`) receives the realised sequences as capture-format
      samples (same slots, loss mask from x_P on, the features the loop fed its draft), each with
      the target's continuation past its stop that the last round's count read (None: nothing
      written).
    target_dtype: the dtype the target loads in (capture's --dtype), on the draft's device.
    names: each wiring's name in the report (None: a preset's own name, else none).
    limit: only the first `limit` prompts run (None: all of them).
    engine: whose counting (None: vLLM for a chain, SGLang for a tree); SGLang runs one more
      round after each request's stop.
    layers: the slots to capture (capture's --layers; None: the draft's configured ids and the
      target's last state). Wider than the wiring needs when the realised sequences under `out`
      are to be searched for the trained wiring (`reconcile --prompts`).
    """

    spec: DraftSpec
    max_new: int
    wirings: Sequence[str | Sequence[int]] = ("train",)
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    verification: Verification | None = None
    seed: int = 0
    out: str | Path | None = None
    target_dtype: str = "auto"
    names: Sequence[str | None] | None = None
    limit: int | None = None
    engine: Engine | None = None
    layers: str | None = None


@dataclass(frozen=True)
class _WiringRun:
    """One wiring's part of the run: the wiring, its folder (None: nothing written), the key of
    its settings that folder is marked with, and the report the prompts' rounds fill."""

    wiring: Wiring
    folder: Path | None
    key: str
    result: WiringAccept


@dataclass(frozen=True)
class _Loop:
    """What every prompt's run reads, resolved once: the target and the draft, the settings, the
    engine and its rule, capture's plan (in the target's dtype) and the prompt's cut."""

    model: TargetModel
    draft: Draft
    live: LiveSettings
    engine: Engine
    rules: SamplingSettings
    prep: Prepared
    input: str | Path
    cut: int  # a prompt's tokens kept: the deepest verified position must fit


def live_accept(
    draft: Draft,
    target: str | Path,
    input: str | Path,
    live: LiveSettings,
    *,
    progress: Progress | None = None,
    model: TargetModel | None = None,
) -> AcceptReport:
    """Run speculative decoding of `draft` against `target` over INPUT's prompts (capture's forms:
    a record's prompt is what precedes its first loss-masked token; an `{"input_ids"}` line
    without a mask is all prompt) and report its rounds per wiring, mode "live", as `live` asks
    (`LiveSettings`: each field there).

    The engine's rule and the wirings' folders are settled before any weights load, so a wrong
    flag or folder fails at once; then every prompt (the first `live.limit`) runs under every
    wiring, each wiring's realised sequences written under `live.out` as they come. A prompt the
    loop cannot run is reported skipped, once.

    draft: loaded with the target (its embedding), on the device and dtype to run; the target
      loads in `live.target_dtype` (capture's --dtype) on the draft's device.
    progress: called with (prompt runs done, of how many) after each prompt under each wiring.
    model: the target, already loaded in `live.target_dtype` on the draft's device (a caller
      running the loop more than once loads it once); None: loaded here.
    """
    from inspector.capture.transformers_target import TargetModel

    engine, rules = _rules(draft, live)
    prep, settings = _prepare(draft, target, input, live)
    infos = plan_infos(prep.plan)
    runs = _plan_wirings(draft, prep, infos, live, engine, rules)
    records = prep.records if live.limit is None else prep.records[: live.limit]
    if model is None:
        model = TargetModel(prep.target, dtype=live.target_dtype, device=settings.device)
    save_dtype = str(model.dtype).replace("torch.", "")
    loop = _Loop(
        model=model,
        draft=draft,
        live=live,
        engine=engine,
        rules=rules,
        prep=replace(prep, settings=replace(settings, save_dtype=save_dtype)),
        input=input,
        cut=prep.max_length - live.max_new - live.spec.steps,
    )
    skipped: list[SkippedSample] = []
    tick = _ticker(progress, len(records) * len(runs))
    for run in runs:
        # the same prompt fails under every wiring: report it once, from the first
        _run_wiring(loop, run, records, skipped if run is runs[0] else None, tick)
    return _report(loop, target, infos, [run.result for run in runs], skipped)


def _rules(draft: Draft, live: LiveSettings) -> tuple[Engine, SamplingSettings]:
    """The engine and its rule at the requests' sampling (the engine's default rule unless one is
    named), refused where the loop cannot run them as the engine would: before anything loads."""
    engine = live.engine if live.engine is not None else default_engine(live.spec.is_chain)
    if live.max_new < 1:
        raise InputError(
            None, setting_field("max-new"), f"{live.max_new}: at least 1 (the prefill's token)"
        )
    sampling = Sampling(live.temperature, live.top_k, live.top_p)
    if draft.config.block is not None:  # the block forward masks its windows itself
        check_block_live(draft, live.spec, sampling)
    windowed = [i for i in range(draft.config.num_layers) if draft.config.sliding_window(i)]
    if windowed and draft.config.block is None:
        raise InputError(
            Path(draft.path) / "config.json" if draft.path else None,
            "sliding_window",
            f"draft layer {windowed[0]} has a sliding window: the live loop does not model one "
            "(the replay does)",
        )
    verification = live.verification
    if verification is None:
        verification = Verification(default_rule(engine.value))
    if verification.rule.engine != engine.value:
        raise InputError(
            None,
            setting_field("verify"),
            f"{verification.rule.value} is not {engine.display}'s rule",
        )
    verification.check_tree(live.spec.is_chain)
    if live.spec.early_stop and not sampling.greedy and verification.rule.samples_drafts:
        raise InputError(
            None,
            setting_field("p-min"),
            f"{Engine.LLAMACPP.display}'s early stop reads a greedy draft: not a sampled-draft "
            "rule",
        )
    return engine, SamplingSettings(sampling, verification)


def _prepare(
    draft: Draft, target: str | Path, input: str | Path, live: LiveSettings
) -> tuple[Prepared, CaptureSettings]:
    """capture's plan of the run (the slots to return, the prompts, the settings key), as
    `capture --generate` makes it, and the settings it was made under."""
    from inspector.capture.run import CaptureSettings, prepare

    ids = draft_ids(draft)
    settings = CaptureSettings(
        layers=live.layers,
        draft=draft.path or None,
        generate=live.max_new,
        temperature=live.temperature,
        seed=live.seed,
        dtype=live.target_dtype,
        device=str(draft.device),
        save_dtype="float32",  # replaced by the target's own dtype once it is loaded
    )
    return prepare(target, input, settings, draft_ids=ids), settings


def _plan_wirings(
    draft: Draft,
    prep: Prepared,
    infos: list[SlotInfo],
    live: LiveSettings,
    engine: Engine,
    rules: SamplingSettings,
) -> list[_WiringRun]:
    """Each wiring parsed over capture's slots, with its folder under `out` and its settings key;
    a folder named twice, or one another run's settings already hold, fails here."""
    from inspector.capture import store

    cfg = draft.config
    layers = configured_layers(cfg.aux_layer_ids, cfg.aux_layer_convention)
    parsed = [parse_wiring(w, infos, cfg.num_fc_blocks, layers) for w in live.wirings]
    folders: list[Path | None] = [None] * len(parsed)
    if live.out is not None:
        folders = [live_folder(live.out, t, w) for t, w in zip(live.wirings, parsed, strict=True)]
        if len(set(folders)) != len(folders):
            raise InputError(None, setting_field("wiring"), "the same wiring twice")
    names = live.names or [preset_name(text) for text in live.wirings]
    runs = [
        _WiringRun(
            w,
            fold,
            run_key(prep, draft, live.spec, w, engine, rules),
            WiringAccept(w, named_label(w, infos, nm), live.spec.steps, name=nm),
        )
        for w, fold, nm in zip(parsed, folders, names, strict=True)
    ]
    for run in runs:
        if run.folder is not None:  # before the weights load: a wrong folder fails at once
            store.check_output(run.folder, run.key)
    return runs


def _ticker(progress: Progress | None, total: int) -> Callable[[], None]:
    """A callback that counts one prompt run under one wiring towards `total`."""
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total)

    return tick


def _run_wiring(
    loop: _Loop,
    run: _WiringRun,
    records: Sequence[Record],
    skipped: list[SkippedSample] | None,
    tick: Callable[[], None],
) -> None:
    """One wiring over every prompt: its folder's marker first, each prompt's rounds into its
    report (and its sample into the folder), then the lengths and the finished config.
    `skipped`: where a prompt the loop cannot run is said (None: said already)."""
    from inspector.capture import store

    fold = run.folder
    if fold is not None:
        fold.mkdir(parents=True, exist_ok=True)
        # the marker first, as capture writes it: an interrupted run leaves a folder that a
        # rerun with the same settings may overwrite, and nobody else's
        store.write_config(fold, _live_config(loop, run, len(records), False))
    settings = _sequence_settings(loop, run.wiring)
    lengths: dict[int, int] = {}
    for i, r in enumerate(records):
        try:
            seq = _decode(loop, settings, i, r)
        except InputError as e:
            if skipped is not None:
                skipped.append(SkippedSample.from_error(i, r.where, e))
            tick()
            continue
        path = r.where
        if fold is not None:
            path = write_live_sample(fold, i, seq, r.category)
            lengths[i] = len(seq.ids)
        run.result.per_sample.append(
            live_sample_replay(seq, i, path, loop.live.spec, loop.rules.sampling.greedy, r.category)
        )
        tick()
    if fold is not None:
        store.write_lengths(fold, lengths)
        store.write_config(fold, _live_config(loop, run, len(records), True))


def _sequence_settings(loop: _Loop, wiring: Wiring) -> SequenceSettings:
    """How each prompt's loop runs under `wiring`: the run's settings as `run_sequence` reads them."""
    return SequenceSettings(
        spec=loop.live.spec,
        wiring=wiring,
        plan_slots=loop.prep.plan.slots,
        max_new=loop.live.max_new,
        sampling=loop.rules.sampling,
        verification=loop.rules.verification,
        eos=loop.prep.info.eos_ids,
        engine=loop.engine,
    )


def _decode(loop: _Loop, settings: SequenceSettings, i: int, record: Record) -> LiveSequence:
    """Prompt `i`'s rounds under `settings` (`run_sequence`), its generator seeded from the seed and
    the prompt's index as capture --generate seeds it; InputError where it cannot run."""
    prompt = record.prompt[: loop.cut]
    if not prompt:
        raise InputError(record.where, None, "no prompt token before the generated part")
    gen = torch.Generator().manual_seed((loop.live.seed * 1_000_003 + i) % (1 << 62))
    with torch.inference_mode():
        run = run_block_sequence if loop.draft.config.block is not None else run_sequence
        seq = run(loop.model, loop.draft, prompt, settings, gen)
    if len(seq.ids) < 3:
        raise InputError(record.where, None, f"{len(seq.ids)} tokens after generation")
    return seq


def _report(
    loop: _Loop,
    target: str | Path,
    infos: list[SlotInfo],
    results: list[WiringAccept],
    skipped: list[SkippedSample],
) -> AcceptReport:
    """The run as the replay reports one, mode "live"."""
    draft, sampling = loop.draft, loop.rules.sampling
    n_samples = len({s.index for wa in results for s in wa.per_sample})
    return AcceptReport(
        spec=loop.live.spec,
        mode="live",
        checkpoint=draft.path,
        samples=n_samples,
        device=str(draft.device),
        dtype=str(draft.dtype).replace("torch.", ""),
        slots=infos,
        wirings=results,
        skipped=skipped,
        verifier=str(target),
        engine=loop.engine,
        sampling=None if sampling.greedy else loop.rules,
        family=draft.config.block.family if draft.config.block is not None else None,
    )


def _live_config(loop: _Loop, run: _WiringRun, n: int, complete: bool) -> dict:
    """capture's data_config.json for the loop's samples, keyed by the loop's settings too."""
    from inspector.capture.run import data_config

    cfg = data_config(loop.prep, loop.input, complete)
    cfg["format"]["num_samples"] = n
    cfg["capture"]["key"] = run.key
    s = loop.prep.settings
    cfg["live"] = {
        "spec": loop.live.spec.to_dict(),
        "wiring": list(run.wiring.slots),
        "temperature": s.temperature,
        "seed": s.seed,
        "sampling": loop.rules.to_dict(),
        "features": "the prefill's and the verify forwards' states: what the loop fed its draft",
    }
    return cfg
