"""What each reader of a block draft's config (the reference, and every engine that serves block
drafts) feeds its fc blocks: the wirings `accept` replays beside the trained one.

The readings are `engine_reading.engine_reads`'s (vLLM's +1 on DFlash ids, SGLang's guess where a
config names none, ...) and the reference's own (`BlockConfig.layer_ids` + 1: the ids as written,
or its default spread). `plan_block_wirings` puts them beside the configured wiring and the
trained one (the doctor's search), as slots of the samples: what `accept` and the app show."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from inspector.doctor.wiring.block_search import BlockSearch
from inspector.doctor.wiring.engine_reading import engine_reads
from inspector.draft import BlockConfig, Draft
from inspector.engines import Engine
from inspector.formats.block_speculators import reader_view
from inspector.sample import Sample
from inspector.wiring import Wiring, layers_wiring

REFERENCE = "dflash 0.1.0 (reference)"


@dataclass(frozen=True)
class BlockFeed:
    """One reader's feed: the HF layer reaching each fc block, in block order (None: it cannot
    serve the draft, `problem` says why)."""

    reader: str  # "vLLM 0.32", or REFERENCE
    engine: Engine | None  # None: the reference
    fed: tuple[int, ...] | None
    problem: str | None

    def to_dict(self) -> dict:
        return {
            "reader": self.reader,
            "engine": self.engine.value if self.engine is not None else None,
            "fed": list(self.fed) if self.fed is not None else None,
            "problem": self.problem,
        }


def block_feeds(
    config: Mapping,
    block: BlockConfig,
    num_layers: int,
    n_blocks: int,
    engines: Sequence[Engine] | None = None,
) -> list[BlockFeed]:
    """The reference's feed, then each engine reader's (`engines`: only theirs), for a target of
    `num_layers` layers and a draft whose fc takes `n_blocks` states."""
    out = [BlockFeed(REFERENCE, None, tuple(k + 1 for k in block.layer_ids), None)]
    for r in engine_reads(config, num_layers, n_blocks, draft=block.family):
        if engines is not None and r.reader.engine not in engines:
            continue
        fed = r.fed
        usable = r.problem is None and fed is not None and all(k is not None for k in fed)
        out.append(
            BlockFeed(
                r.reader.label,
                Engine(r.reader.engine),
                tuple(int(k) for k in fed) if usable and fed is not None else None,
                None if usable else (r.problem or "it feeds an fc block nothing"),
            )
        )
    return out


@dataclass(frozen=True)
class AcceptRow:
    """One wiring `accept` replays on a block draft: its name, the HF layer of each fc block,
    and the readers that feed exactly those layers."""

    name: str
    layers: tuple[int, ...]
    fed_by: tuple[str, ...] = ()


def accept_rows(
    configured: Sequence[int], trained: Sequence[int] | None, feeds: Sequence[BlockFeed]
) -> list[AcceptRow]:
    """The configured ids' wiring ("configured"), the trained one where the doctor's search puts
    it elsewhere ("searched"), then each reader's feed that is neither, named by its reader;
    every row lists the readers that feed it."""
    rows: list[AcceptRow] = [AcceptRow("configured", tuple(configured))]
    if trained is not None and tuple(trained) != tuple(configured):
        rows.append(AcceptRow("searched", tuple(trained)))
    for f in feeds:
        if f.fed is None:
            continue
        at = next((i for i, r in enumerate(rows) if r.layers == f.fed), None)
        if at is None:
            rows.append(AcceptRow(f.reader, f.fed, (f.reader,)))
        else:
            r = rows[at]
            rows[at] = AcceptRow(r.name, r.layers, (*r.fed_by, f.reader))
    return rows


def target_layers(target: str | Path | None, block: BlockConfig, samples: Sequence[Sample]) -> int:
    """The target's layer count: --target's config, else the draft's num_target_layers, else the
    deepest layer the samples hold."""
    from inspector.formats.layer_convention import target_layer_count

    infos = samples[0].slot_info if samples else []
    held = [s.hf_index for s in infos if s.hf_index is not None and not s.post_norm]
    return (
        (target_layer_count(target) if target else None)
        or block.num_target_layers
        or max(held, default=0)
    )


@dataclass
class BlockPlan:
    """The wirings to show of a block draft: each row with its slots (None where the samples lack
    its layers), the search that named the trained one, the readers' feeds, and notes."""

    rows: list[tuple[AcceptRow, Wiring | None]]
    search: BlockSearch | None
    feeds: list[BlockFeed]
    notes: list[str] = field(default_factory=list)

    @property
    def held(self) -> list[tuple[AcceptRow, Wiring]]:
        return [(r, w) for r, w in self.rows if w is not None]

    def gated(self, which: Engine) -> list[str]:
        """The held rows a `--fail-under` on `which`'s count checks: the ones `which`'s own
        readers feed (what it serves of this config); where it feeds none of them, the
        configured row. Another reader's feed, or the searched wiring, never fails the gate."""
        own = {f.fed for f in self.feeds if f.engine == which and f.fed is not None}
        names = [r.name for r, _ in self.held if r.layers in own]
        return names or [r.name for r, _ in self.held if r.name == "configured"]


def plan_block_wirings(
    draft: Draft,
    samples: Sequence[Sample],
    target: str | Path | None = None,
    engines: Sequence[Engine] | None = None,
) -> BlockPlan:
    """The configured ids' wiring, the trained one (the doctor's search over `samples`, where it
    puts them elsewhere) and each reader's feed (`accept_rows`; `engines`: only the reference's
    and theirs), as slots of the samples: what `accept` replays and the app toggles over."""
    from inspector.doctor.checks.block_checks import decided_layers
    from inspector.doctor.wiring.block_search import search_from_config
    from inspector.formatting import pct

    block = draft.config.block
    assert block is not None
    infos = samples[0].slot_info if samples else []
    num_layers = target_layers(target, block, samples)
    configured = tuple(block.hf_layer_ids)
    notes: list[str] = []
    search, trained = None, None
    try:
        search, scored = search_from_config(draft, samples, num_layers)
        trained = decided_layers(search, block, scored)
        if tuple(trained) != configured:
            than = (
                ""
                if scored is None
                else f": block accuracy {pct(search.best.accuracy)} against {pct(scored.accuracy)}"
            )
            notes.append(
                f"the weights fit HF {list(trained)} (ids {list(search.trained_ids)}), not the "
                f"configured HF {list(configured)}{than} (the doctor's wiring search on "
                f"{len(samples)} samples): shown as 'searched'"
            )
    except ValueError as e:  # the samples hold fewer layers than fc takes
        notes.append(f"no wiring search: {e}")
    # speculators' layout as the engines read it once their speculators loader has flattened it
    raw = reader_view(json.loads((Path(draft.path) / "config.json").read_text()))
    feeds = block_feeds(raw, block, num_layers, draft.config.num_fc_blocks, engines)
    notes += [f"{f.reader} feeds nothing to replay: {f.problem}" for f in feeds if f.fed is None]
    rows = []
    for row in accept_rows(configured, trained, feeds):
        w = layers_wiring(row.layers, infos)
        if w is None:
            notes.append(
                f"{row.name} HF {list(row.layers)}: the samples do not hold those layers "
                "(capture --layers)"
            )
        rows.append((row, w))
    return BlockPlan(rows, search, feeds, notes)
