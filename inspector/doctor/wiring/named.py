"""The wirings the doctor quotes by name, and the one it recommends.

- configured: what the draft's aux layer ids select on an engine (read as `layer_ids` decides);
- train / serve: the presets of `inspector.wiring`, resolved through the slots' HF indices (the
  draft's configured layers; the train layers but the embedding, plus the last layer);
- engine default: what engines feed a config without ids (`engine_default`).

The search always evaluates these to the end (the wiring finding quotes their margins).
`recommend` picks the wiring to serve from the ranked results.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from inspector.doctor.checks.engine_default import EngineFeed, engine_defaults
from inspector.doctor.checks.layer_ids import LayerIdFacts, layer_id_facts
from inspector.doctor.checks.malformed_ids import MalformedIds, malformed_ids
from inspector.doctor.checks.slot_identity import SlotIdentity
from inspector.doctor.report import WiringResult
from inspector.doctor.serving import hf_indices
from inspector.doctor.stats import clearly_better
from inspector.doctor.wiring.engine_reading import EngineRead, engine_reads, id_places
from inspector.doctor.wiring.fed_states import slots_fed
from inspector.doctor.wiring.search import WiringSearch
from inspector.draft import Draft
from inspector.errors import InputError
from inspector.evaluate import Evaluator
from inspector.sample import SlotInfo
from inspector.wiring import Wiring, configured_layers, serve_wiring, train_wiring

ENGINE_DEFAULT = "engine default"  # the named wiring engines feed a config without ids


@dataclass
class NamedWirings:
    """The wirings the report quotes by name, and how the config's ids were read."""

    named: dict[str, tuple[int, ...]]
    layer_ids: LayerIdFacts
    engine_defaults: list[EngineFeed] = field(default_factory=list)
    num_layers: int | None = None
    # what each engine release reads from the draft's config, and the wiring it feeds (None:
    # it feeds layers the samples lack, or cannot serve the draft)
    engine_reads: list[tuple[EngineRead, tuple[int, ...] | None]] = field(default_factory=list)
    # every place the config writes ids (`engine_reading.id_places`)
    id_places: list[tuple[str, tuple[int, ...], tuple[int, ...]]] = field(default_factory=list)
    # the draft's ids when they repeat a layer or name one below 0 (they then select no wiring)
    malformed: MalformedIds | None = None

    @property
    def configured(self) -> tuple[int, ...] | None:
        return self.named.get("configured")

    @property
    def engine_fed(self) -> list[tuple[int, ...]]:
        """The wirings the engines feed, each once."""
        return list(dict.fromkeys(w for _, w in self.engine_reads if w is not None))

    @property
    def protected(self) -> list[tuple[int, ...]]:
        return list(dict.fromkeys([*self.named.values(), *self.engine_fed]))


def named_wirings(
    ev: Evaluator,
    infos: Sequence[SlotInfo],
    *,
    override: Sequence[int] | None = None,
    identity: SlotIdentity | None = None,
    target: object = None,
) -> NamedWirings:
    """configured (what the draft's aux ids select on an engine), train and serve; `infos` carry
    the slots' identity as decided (`slot_identity`); and what each engine release reads from
    the draft's config (`engine_reading`; `target`: the target's class, for SGLang's rule)."""
    data_config = ev.samples.data_config
    ids = layer_id_facts(
        ev.draft.config,
        infos,
        ev.n_blocks,
        override=override if override is not None else ev.slot_layers,
        data_config=Path(data_config) if data_config is not None else None,
        identity=identity,
    )
    named: dict[str, tuple[int, ...]] = {}
    if ids.configured is not None:
        named["configured"] = ids.configured
    cfg = ev.draft.config
    layers = configured_layers(cfg.aux_layer_ids, cfg.aux_layer_convention)
    for name, fn in (("train", train_wiring), ("serve", serve_wiring)):
        try:
            named[name] = fn(infos, ev.n_blocks, layers).slots
        except InputError:
            pass
    n_layers = identity.num_layers if identity is not None else None
    feeds = engine_defaults(infos, ev.n_blocks, n_layers)
    for feed in feeds:  # scored beside the others whenever the samples hold its layers
        if feed.wiring is not None:
            named.setdefault(ENGINE_DEFAULT, feed.wiring)
    reads = []
    raw, gguf = engine_config_of(ev.draft)
    if raw is not None and n_layers is not None:
        for r in engine_reads(raw, n_layers, ev.n_blocks, target=target, gguf=gguf):
            # in the order the engine feeds them (llama.cpp: as listed, a repeat included)
            fed = slots_fed(r.fed, infos) if r.fed is not None and r.problem is None else None
            reads.append((r, fed))
    places = id_places(raw) if raw is not None and not gguf else []
    bad = malformed_ids(ids.draft, reads, infos)
    return NamedWirings(named, ids, feeds, n_layers, reads, places, bad)


def engine_config_of(draft: Draft) -> tuple[dict | None, bool]:
    """(what the engines read, whether it is a GGUF's keys): the draft's config.json as parsed,
    or a llama.cpp GGUF's `eagle3.` keys nested as {"eagle3": {...}}; None for a draft with no
    file (the loader has read it already, so an unreadable one does not land here)."""
    import json

    from inspector.formats.checkpoint import is_gguf

    if not draft.path:
        return None, False
    if is_gguf(draft.path):
        from inspector.formats.gguf_draft import read_gguf_header

        keys = read_gguf_header(draft.path).keys
        nested = {k.split(".", 1)[1]: v for k, v in keys.items() if k.startswith("eagle3.")}
        return {"eagle3": nested}, True
    path = Path(draft.path) / "config.json"
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError):
        return None, False
    return (raw, False) if isinstance(raw, dict) else (None, False)


def wiring_results(
    ws: WiringSearch, infos: Sequence[SlotInfo], named: dict[str, tuple[int, ...]]
) -> list[WiringResult]:
    return [
        WiringResult(
            wiring=acc.wiring,
            label=Wiring(acc.wiring).label(infos),
            all_tok=acc.counts(),
            samples=len(acc.hits),
            complete=not acc.dropped,
            mean_logp=acc.mean_logp(),
            roles=[n for n, w in named.items() if w == acc.wiring],
        )
        for acc in ws.ranked()
    ]


def is_ascending(w: Sequence[int], infos: Sequence[SlotInfo]) -> bool:
    """Whether an engine's ascending capture order can feed w (by HF index, else slot index)."""
    hf = hf_indices(w, infos)
    keys = hf if all(k is not None for k in hf) else list(w)
    return all(a < b for a, b in zip(keys, keys[1:], strict=False))


def recommend(
    ws: WiringSearch,
    results: list[WiringResult],
    infos: Sequence[SlotInfo],
    configured: tuple[int, ...] | None = None,
) -> tuple[int, ...]:
    """The wiring to serve: the configured one while the top-ranked one does not clearly beat it
    (adjacent layers carry nearly the same information: a neighbour ranked first by a few
    positions is noise, never a reason to change the ids); else the top-ranked one, unless it is
    not ascending and not clearly better than the best ascending one (which then needs no
    permuted checkpoint)."""
    top = results[0]
    if configured is not None and configured != top.wiring:
        conf = next((r for r in results if r.wiring == configured and r.complete), None)
        if (
            conf is not None
            and is_ascending(configured, infos)
            and not clearly_better(ws.hits(top.wiring), ws.hits(configured))
        ):
            return configured
    if is_ascending(top.wiring, infos):
        return top.wiring
    asc = next((r for r in results if r.complete and is_ascending(r.wiring, infos)), None)
    if asc is None or clearly_better(ws.hits(top.wiring), ws.hits(asc.wiring)):
        return top.wiring
    return asc.wiring
