"""The runs `reconcile` holds an engine's log against: the replay of the samples under each
candidate wiring (`replay_samples`), or the live loop over the engine's prompts against the target
(`live_requests`: real speculative decoding, the same rounds the engine runs at temperature 0 and
each round's odds at a temperature). Both find the wiring the weights were trained on first (the
wiring search, never the config's), replay what the engine may be feeding (`candidates`), and,
under an engine that feeds nothing for the last id, the draft with those fc columns zeroed."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from inspector.doctor.reconcile.candidates import candidate_wirings, engine_fed, silent_feeds
from inspector.doctor.reconcile.request import (
    DEFAULT_MAX_NEW,
    ReconcileHooks,
    ReconcileLoad,
    ReconcileRequest,
)
from inspector.doctor.wiring.engine_run import engine_run_notes
from inspector.errors import InputError, setting_field
from inspector.wiring import Wiring

if TYPE_CHECKING:
    from inspector.doctor.wiring.trained import TrainedWiring
    from inspector.engines import Engine
    from inspector.evaluate import Evaluator
    from inspector.formats.engine_log import EngineLog
    from inspector.formats.target_config import HyperConnections
    from inspector.serving.live import LiveSettings
    from inspector.serving.replay import AcceptReport
    from inspector.serving.spec import DraftSpec


@dataclass
class Replayed:
    """What the log is held against: the report (a wiring each), the samples' (index, token key)
    to pair the requests by, the configured wiring's index (None: the config names none of the
    slots), (the search's contenders' indices, the wiring search's answer), and the target's
    hyper-connections (None: none)."""

    report: AcceptReport
    samples: list[tuple[int, bytes]]
    configured: int | None
    trained: tuple[list[int], TrainedWiring]
    hyper_connections: HyperConnections | None


def search(ev: Evaluator, hooks: ReconcileHooks) -> TrainedWiring:
    """The wiring the weights were trained on (`doctor.wiring.trained`), never the config's."""
    from inspector.doctor.wiring.trained import find_trained_wiring

    with hooks.stages() as advance:
        return find_trained_wiring(ev, progress=advance, fingerprint=True)


def _as_engine_runs_it(draft, engine: Engine, hooks: ReconcileHooks):
    """The draft `engine` runs (`doctor.wiring.engine_run`), a note for each way it is another."""
    from inspector.doctor.wiring.engine_run import engine_run

    run = engine_run(draft, engine.value)
    for line in engine_run_notes(run):
        hooks.note(line)
    return run


def replay_samples(
    request: ReconcileRequest,
    load: ReconcileLoad,
    spec: DraftSpec,
    engine: Engine,
    hooks: ReconcileHooks,
) -> Replayed:
    """The samples replayed under every candidate wiring, as `engine` runs the draft."""
    from inspector.doctor.reconcile.pipeline import token_key
    from inspector.formats.target_config import (
        data_config_hyper_connections,
        data_config_target,
        read_hyper_connections,
        read_target_class,
    )
    from inspector.serving.replay import Replayer

    loaded = load.samples(request.device, spec.steps if spec.is_chain else 1)
    ev = loaded.evaluator
    trained = search(ev, hooks)
    infos = ev.slot_info
    layers = next((s.hf_index for s in infos if s.verifier and not s.post_norm), None)
    target = read_target_class(loaded.target) or data_config_target(ev.samples.data_config)
    fed = engine_fed(ev.draft, layers, target)
    wirings, names, configured, ti = candidate_wirings(
        request.wiring, infos, ev.n_blocks, ev.draft, trained.contenders, engine_fed=fed
    )
    n = len(ev.samples) if request.limit is None else min(request.limit, len(ev.samples))
    served = ev.with_draft(_as_engine_runs_it(ev.draft, engine, hooks).draft)  # the search keeps ev
    with hooks.bar("replaying") as advance:
        report = Replayer(served, spec, engine).run(
            wirings,
            limit=request.limit,
            names=names,
            progress=advance,
        )
    nothing = engine.spec.feeds_nothing_for_last
    silent, notes = silent_feeds(fed, infos, served.draft, layers) if nothing else ([], [])
    for line in notes:
        hooks.note(line)
    for name, label, w, silent_draft in silent:
        with hooks.bar("replaying") as advance:
            more = Replayer(served.with_draft(silent_draft), spec, engine).run(
                [w], limit=request.limit, names=[name], progress=advance
            )
        report.wirings.append(replace(more.wirings[0], label=label))
    samples = []
    for i in range(n):
        try:
            s = ev.samples[i]
        except InputError:
            continue
        samples.append((i, token_key(s.input_ids.tolist())))
    hc = read_hyper_connections(loaded.target) or data_config_hyper_connections(
        ev.samples.data_config
    )
    return Replayed(report, samples, configured, (ti, trained), hc)


def live_requests(
    request: ReconcileRequest,
    load: ReconcileLoad,
    spec: DraftSpec,
    engine: Engine,
    log: EngineLog,
    hooks: ReconcileHooks,
) -> Replayed:
    """The live loop over the prompts (the engine's requests): real speculative decoding against
    the target, the same rounds the engine runs at temperature 0, and at a temperature each
    round's odds under the engine's rule."""
    from inspector.capture.inputs import read_input
    from inspector.capture.plan import plan_slots
    from inspector.capture.transformers_target import TargetModel, read_target_info
    from inspector.doctor.wiring.trained import search_layers
    from inspector.evaluate import Evaluator
    from inspector.formats import SampleSet
    from inspector.formats.target_config import read_hyper_connections, read_target_class
    from inspector.serving.live import (
        draft_ids,
        live_accept,
        live_folder,
        open_live_draft,
        plan_infos,
    )

    if request.samples:
        raise InputError(None, setting_field("prompts"), "replaces SAMPLES: pass one or the other")
    paths = load.live()
    target, prompts = paths.target, paths.prompts
    draft = open_live_draft(paths.draft, target, dtype=request.dtype, device=request.device)
    served = _as_engine_runs_it(draft, engine, hooks).draft  # the wiring search keeps the weights
    # every layer the wiring search needs, whatever the config names: the config is where the
    # wiring bug lives, so the slots it names cannot be the only ones captured
    info = read_target_info(target)
    n_blocks = draft.config.num_fc_blocks
    layers = ",".join(map(str, search_layers(info.num_layers, draft.config.aux_layer_ids)))
    infos = plan_infos(plan_slots(info.num_layers, layers=layers))
    # the presets: over the slots capture's plan gives this draft (its configured layers and
    # the target's last one), as `accept --live` makes them
    narrow = plan_infos(plan_slots(info.num_layers, draft=draft_ids(draft)))
    wirings, names, _, _ = candidate_wirings(
        request.wiring, infos, n_blocks, draft, preset_infos=narrow
    )
    if not wirings:  # no configured ids and no preset: any wiring captures every searched layer
        wirings, names = [Wiring(tuple(range(n_blocks)))], [None]
    model = TargetModel(target, dtype=request.dtype, device=str(draft.device))
    live = _live_settings(request, spec, engine, log, layers)

    def run(draft_run, settings: LiveSettings) -> AcceptReport:
        with hooks.bar("speculative decoding") as advance:
            return live_accept(draft_run, target, prompts, settings, progress=advance, model=model)

    first = [list(wirings[0].slots)]
    with tempfile.TemporaryDirectory(prefix="eagle-reconcile-") as tmp:
        # the first wiring's realised sequences, every searched layer kept: the search's samples
        report = run(served, replace(live, wirings=first, names=names[:1], out=tmp))
        folder = live_folder(tmp, first[0], wirings[0])
        cfg = draft.config
        samples_set = SampleSet(
            [str(folder)],
            vocab_size=cfg.vocab_size,
            hidden_size=cfg.target_hidden_size,
            num_layers=info.num_layers,
        )
        trained = search(Evaluator(draft, samples_set), hooks)
    fed = engine_fed(draft, info.num_layers, read_target_class(target))
    wirings, names, configured, ti = candidate_wirings(
        request.wiring,
        infos,
        n_blocks,
        draft,
        trained.contenders,
        preset_infos=narrow,
        engine_fed=fed,
    )
    done = {report.wirings[0].wiring.slots: report.wirings[0]}
    rest = [(w, n) for w, n in zip(wirings, names, strict=True) if w.slots not in done]
    if rest:
        others = replace(live, wirings=[list(w.slots) for w, _ in rest], names=[n for _, n in rest])
        more = run(served, others)
        done.update({wa.wiring.slots: wa for wa in more.wirings})
    report.wirings = [done[w.slots] for w in wirings]
    nothing = engine.spec.feeds_nothing_for_last
    silent, notes = silent_feeds(fed, infos, served, info.num_layers) if nothing else ([], [])
    for line in notes:
        hooks.note(line)
    for name, label, w, silent_draft in silent:
        more = run(silent_draft, replace(live, wirings=[list(w.slots)], names=[name]))
        report.wirings.append(replace(more.wirings[0], label=label))
    # a live request's tokens are its prompt + what the engine emitted: pair by prompt
    records, _ = read_input(prompts, target, vocab_size=info.vocab_size, max_length=10**9)
    ran = {s.index for s in report.wirings[0].per_sample}
    samples = [(i, list(r.prompt)) for i, r in enumerate(records) if i in ran]
    hc = read_hyper_connections(target)
    return Replayed(report, prompt_pairs(samples, log), configured, (ti, trained), hc)


def _live_settings(
    request: ReconcileRequest, spec: DraftSpec, engine: Engine, log: EngineLog, layers: str
) -> LiveSettings:
    """The live loop's settings: the request's tokens each (else the log's longest output, else
    the default), its sampling and the engine's rule (the request's, else the engine's default),
    every searched layer captured."""
    from inspector.serving.live import LiveSettings
    from inspector.serving.sampling_settings import Verification, parse_rule

    max_new = request.max_new
    if max_new is None:
        lengths = [len(r.output_ids) for r in log.requests if r.output_ids is not None]
        max_new = max(lengths) if lengths else DEFAULT_MAX_NEW
    return LiveSettings(
        spec=spec,
        max_new=max_new,
        target_dtype=request.dtype,
        limit=request.limit,
        engine=engine,
        layers=layers,
        temperature=request.temperature,
        top_k=request.top_k,
        top_p=request.top_p,
        verification=Verification(
            parse_rule(request.verify, engine.value),
            request.threshold_single,
            request.threshold_acc,
        ),
        seed=request.seed,
    )


def prompt_pairs(samples: list[tuple[int, list[int]]], log: EngineLog) -> list[tuple[int, bytes]]:
    """Pair engine requests by their prompt ids (the output is what both decoded greedily): each
    (index, prompt) keyed by the prompt and the output of the request that sent it."""
    by_prompt = {}
    for r in log.requests:
        if r.prompt_ids is not None and r.output_ids is not None:
            by_prompt.setdefault(tuple(r.prompt_ids), r)
    from inspector.doctor.reconcile.pipeline import token_key

    out = []
    for i, prompt in samples:
        r = by_prompt.get(tuple(prompt))
        out.append((i, token_key(prompt + (r.output_ids if r is not None else []))))
    return out
