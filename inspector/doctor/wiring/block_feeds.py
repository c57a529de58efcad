"""What each reader of a block draft's config (the reference, and every engine that serves block
drafts) feeds its fc blocks: the wirings `accept` replays beside the trained one.

The readings are `engine_reading.engine_reads`'s (vLLM's +1 on DFlash ids, SGLang's guess where a
config names none, ...) and the reference's own (`BlockConfig.layer_ids` + 1: the ids as written,
or its default spread). Pure: no torch, no files."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from inspector.doctor.wiring.engine_reading import engine_reads
from inspector.draft import BlockConfig
from inspector.engines import Engine

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
