"""The wirings the doctor quotes by name, and the one it recommends.

- configured: what the draft's aux layer ids select on an engine (read as `layer_ids` decides);
- train / serve: the presets of `inspector.wiring` (all but the last slot; the last N slots);
- engine default: what engines feed a config without ids (`engine_default`).

The search always evaluates these to the end (the wiring finding quotes their margins).
`recommend` picks the wiring to serve from the ranked results.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from inspector.doctor.engine_default import EngineFeed, engine_defaults
from inspector.doctor.layer_ids import LayerIdFacts, layer_id_facts
from inspector.doctor.report import WiringResult
from inspector.doctor.search import WiringSearch
from inspector.doctor.serving import hf_indices
from inspector.doctor.slot_identity import SlotIdentity
from inspector.doctor.stats import clearly_better
from inspector.errors import InputError
from inspector.evaluate import Evaluator
from inspector.sample import SlotInfo
from inspector.wiring import Wiring, serve_wiring, train_wiring

ENGINE_DEFAULT = "engine default"  # the named wiring engines feed a config without ids


@dataclass
class NamedWirings:
    """The wirings the report quotes by name, and how the config's ids were read."""

    named: dict[str, tuple[int, ...]]
    layer_ids: LayerIdFacts
    engine_defaults: list[EngineFeed] = field(default_factory=list)
    num_layers: int | None = None

    @property
    def configured(self) -> tuple[int, ...] | None:
        return self.named.get("configured")

    @property
    def protected(self) -> list[tuple[int, ...]]:
        return list(dict.fromkeys(self.named.values()))


def named_wirings(
    ev: Evaluator,
    infos: Sequence[SlotInfo],
    *,
    override: Sequence[int] | None = None,
    identity: SlotIdentity | None = None,
) -> NamedWirings:
    """configured (what the draft's aux ids select on an engine), train and serve; `infos` carry
    the slots' identity as decided (`slot_identity`)."""
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
    for name, fn in (("train", train_wiring), ("serve", serve_wiring)):
        try:
            named[name] = fn(infos, ev.n_blocks).slots
        except InputError:
            pass
    n_layers = identity.num_layers if identity is not None else None
    feeds = engine_defaults(infos, ev.n_blocks, n_layers)
    for feed in feeds:  # scored beside the others whenever the samples hold its layers
        if feed.wiring is not None:
            named.setdefault(ENGINE_DEFAULT, feed.wiring)
    return NamedWirings(named, ids, feeds, n_layers)


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
    ws: WiringSearch, results: list[WiringResult], infos: Sequence[SlotInfo]
) -> tuple[int, ...]:
    """The wiring to serve: the top-ranked one, unless it is not ascending and not clearly better
    than the best ascending one (which then needs no permuted checkpoint)."""
    top = results[0]
    if is_ascending(top.wiring, infos):
        return top.wiring
    asc = next((r for r in results if r.complete and is_ascending(r.wiring, infos)), None)
    if asc is None or clearly_better(ws.hits(top.wiring), ws.hits(asc.wiring)):
        return top.wiring
    return asc.wiring
