"""The doctor's checks of a block draft (DFlash, DFlash2), each one `Finding`:

- wiring: the layers the weights were trained on (`wiring.block_search`'s search over the layers the
  samples hold) against the config's ids;
- engine_feeds: what each engine that serves block drafts reads from the config (vLLM's +1 on
  dflash_config.target_layer_ids, SGLang's guess where the config names no ids, ONNX Runtime
  GenAI's +1) and the reference's own reading (the ids, or its default spread), each against
  the trained layers, with the fix;
- draft_shape: the block size against the engine's draft length (vLLM queries the anchor and
  num_speculative_tokens masks: a block of K + 1 rows);
- vocab_map: the mask token and its embedding row.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from inspector.doctor.finding import Finding, Kind, Severity
from inspector.doctor.wiring.block_capture import BlockCapture
from inspector.doctor.wiring.block_search import BlockSearch, Layers, Scored
from inspector.doctor.wiring.engine_reading import engine_reads
from inspector.draft import BlockConfig, Draft
from inspector.engines import Engine, all_engines
from inspector.formatting import pct

# the engines' names from the registry (a rename is one edit in inspector/engines/)
_VLLM = Engine.VLLM.display

# a wiring clearly better than the configured one: this many points of block accuracy more
CLEAR_MARGIN = 0.02
REFERENCE = "dflash 0.1.0 (reference)"


def _ids(layers: Sequence[int]) -> list[int]:
    return [k - 1 for k in layers]


@dataclass(frozen=True)
class WiringFacts:
    search: BlockSearch
    configured: Scored | None
    configured_layers: Layers
    capture: BlockCapture | None = None  # the layers the target gave the search (--target)

    def to_dict(self) -> dict:
        return {
            **self.search.to_dict(),
            "configured_layers": list(self.configured_layers),
            "configured": self.configured.to_dict() if self.configured else None,
            "capture": self.capture.to_dict() if self.capture else None,
        }

    def lines(self) -> list[str]:
        out = [
            f"trained (searched): HF {list(self.search.best.layers)}, "
            f"block accuracy {pct(self.search.best.accuracy)}"
        ]
        if self.configured is not None:
            out.append(
                f"configured: HF {list(self.configured_layers)}, "
                f"block accuracy {pct(self.configured.accuracy)}"
            )
        out += [
            f"seed {name}: HF {list(s.layers)}, {pct(s.accuracy)}"
            for name, s in self.search.seeds
            if name != "configured"
        ]
        out.append(
            f"{self.search.evaluated} wirings scored over the held layers "
            f"{list(self.search.held)} in {self.search.sweeps} sweeps"
        )
        if self.capture is not None:
            out.append(self.capture.line())
        return out


def decided_layers(search: BlockSearch, block: BlockConfig, configured: Scored | None) -> Layers:
    """The layers the weights were trained on, as the wiring finding decides: the search's best
    where it is clearly above the configured ids (or those are not held), else the configured."""
    if configured is None or search.best.accuracy >= configured.accuracy + CLEAR_MARGIN:
        return search.best.layers
    return tuple(block.hf_layer_ids)


def wiring_finding(
    search: BlockSearch,
    block: BlockConfig,
    configured: Scored | None,
    capture: BlockCapture | None = None,
) -> Finding:
    """The trained layers against the configured ids; `capture`: the layers the target gave the
    search, named in the summary where the trained ones are among them."""
    best = search.best
    facts = WiringFacts(search, configured, block.hf_layer_ids, capture)
    got = sorted(set(best.layers) & set(capture.layers)) if capture is not None else []
    came = (
        f"HF {got} captured from the target over {capture.samples} samples"
        if capture is not None and got
        else ""
    )
    # the ids as the layout writes them (speculators': HF indices)
    cfg_ids = block.written_ids(block.layer_ids)
    trained = block.written_ids(search.trained_ids)
    where = (
        "the reference's default: the config names none"
        if block.layer_ids_source == "default"
        else block.ids_key
    )
    if configured is None:
        return Finding(
            Kind.WIRING,
            Severity.WARNING,
            f"the samples do not hold the configured layers HF {list(block.hf_layer_ids)}; "
            f"of those they hold, the weights fit ids {trained} best "
            f"(block accuracy {pct(best.accuracy)})" + (f"; {came}" if came else ""),
            "capture the configured layers (capture --layers) to compare them",
            facts,
            wiring=best.layers,
        )
    if (
        best.layers == tuple(block.hf_layer_ids)
        or best.accuracy < configured.accuracy + CLEAR_MARGIN
    ):
        return Finding(
            Kind.WIRING,
            Severity.INFO,
            f"the weights fit the configured ids {cfg_ids} ({where}): block accuracy "
            f"{pct(configured.accuracy)}"
            + (
                ""
                if best.layers == tuple(block.hf_layer_ids)
                else f"; the search's best, {trained}, is within {pct(CLEAR_MARGIN)}"
            )
            + (f"; {came}" if came else ""),
            None,
            facts,
            wiring=tuple(block.hf_layer_ids),
        )
    return Finding(
        Kind.WIRING,
        Severity.ERROR,
        f"the weights were trained on ids {trained} (HF {list(best.layers)}"
        f"{'; ' + came if came else ''}), not the "
        f"configured {cfg_ids} ({where}): block accuracy {pct(best.accuracy)} against "
        f"{pct(configured.accuracy)}",
        f"set {block.ids_key} to {trained}",
        facts,
        wiring=best.layers,
    )


@dataclass(frozen=True)
class Reading:
    label: str
    reads: str
    fed: tuple[int, ...] | None  # HF indices reaching fc blocks 0..N-1
    problem: str | None
    fix: str | None
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {
            "reader": self.label,
            "reads": self.reads,
            "fed": list(self.fed) if self.fed is not None else None,
            "problem": self.problem,
            "fix": self.fix,
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class EngineFacts:
    trained: Layers
    readings: tuple[Reading, ...]
    judged: bool = True  # False: the trained layers are not decided, the feeds only listed

    def to_dict(self) -> dict:
        return {
            "trained": list(self.trained) if self.judged else None,
            "readings": [r.to_dict() for r in self.readings],
        }

    def lines(self) -> list[str]:
        out = []
        for r in self.readings:
            fed = f"feeds HF {list(r.fed)}" if r.fed is not None else "feeds nothing it can use"
            verdict = r.problem or ("the trained layers" if self.judged else "it can serve it")
            out.append(f"{r.label}: {r.reads}; {fed}: {verdict}")
        return out


def _fix(trained: Layers, ascending_only: bool, block: BlockConfig) -> str:
    ids = _ids(trained)
    if ascending_only and list(trained) != sorted(trained):
        return (
            f"it captures in layer order: the trained order {ids} cannot be written; permute "
            "fc's column blocks to ascending layers first"
        )
    return f"set {block.ids_key} to {block.written_ids(ids)}"


def engine_finding(
    config: Mapping,
    family: str,
    num_layers: int,
    trained: Layers,
    block: BlockConfig,
    engines: Sequence[Engine] | None = None,
    certain: bool = True,
) -> Finding:
    """Each engine's reading of the config (and the reference's) against the trained layers;
    `engines`: only theirs (None: every engine that reads this kind of draft). `certain`: False
    where the trained layers are not decided (the samples lack the configured ones): each
    reading is listed with only the reader's own problems, and nothing is fixed."""
    n = len(trained)
    readings: list[Reading] = []
    ref_ids = list(block.layer_ids)  # as written, or its default spread (the loader's)
    ref_fed = tuple(k + 1 for k in ref_ids)
    ref_ok = ref_fed == tuple(trained) or not certain
    readings.append(
        Reading(
            REFERENCE,
            f"reads {list(block.layer_ids)} (+1)"
            if block.layer_ids_source != "default"
            else f"no ids: its default spread {ref_ids} (build_target_layer_ids), +1",
            ref_fed,
            None if ref_ok else f"not the trained HF {list(trained)}",
            None if ref_ok else _fix(trained, False, block),
        )
    )
    for r in engine_reads(config, num_layers, n, draft=family):
        if engines is not None and r.reader.engine not in engines:
            continue
        fed = r.fed
        problem = r.problem
        fix: str | None = None
        if problem is None and certain and fed is not None and tuple(fed) != tuple(trained):
            problem = f"not the trained HF {list(trained)}"
            fix = _fix(trained, not r.reader.as_listed, block)
        elif problem is not None:
            # its own limit: the ids fix it only where the config does not name the trained ones
            fix = (
                None
                if not certain
                else f"none in the config: {r.reader.label} cannot feed HF {list(trained)}"
                if tuple(block.hf_layer_ids) == tuple(trained)
                else _fix(trained, not r.reader.as_listed, block)
            )
        reads = (
            f"reads {r.where} {list(r.ids or ())}"
            if r.where
            else (r.notes[0] if r.notes else "no ids: its default")
        )
        readings.append(
            Reading(
                r.reader.label,
                reads,
                fed,
                problem,
                fix,
                r.notes,
            )
        )
    bad = [r for r in readings if r.problem]
    facts = EngineFacts(tuple(trained), tuple(readings), certain)
    if not certain:
        return Finding(
            Kind.ENGINE_FEEDS,
            Severity.WARNING if bad else Severity.INFO,
            "the samples lack the configured layers, so the trained ones are not decided: each "
            "reader's feed is listed"
            + (f"; {', '.join(r.label for r in bad)} cannot serve the config" if bad else ""),
            None,
            facts,
        )
    if not bad:
        return Finding(
            Kind.ENGINE_FEEDS,
            Severity.INFO,
            f"every reader feeds the trained layers HF {list(trained)}",
            None,
            facts,
        )
    names = ", ".join(r.label for r in bad)
    fixes = sorted({r.fix for r in bad if r.fix})
    return Finding(
        Kind.ENGINE_FEEDS,
        Severity.ERROR,
        f"{names} {'does' if len(bad) == 1 else 'do'} not feed the trained layers "
        f"HF {list(trained)}",
        "; ".join(fixes) if fixes else None,
        facts,
    )


@dataclass(frozen=True)
class SizeFacts:
    block_size: int
    engine_k: int | None

    def to_dict(self) -> dict:
        return {"block_size": self.block_size, "num_speculative_tokens": self.engine_k}


def block_size_finding(block: BlockConfig, k: int | None) -> Finding:
    """The block a round runs is the anchor and K masks: K = block_size - 1 runs the block the
    draft was trained on; another K runs a block of another length (bidirectional rows see
    another number of masks). A DSpark draft that drafts from the anchor's row (its
    `anchor_drafts`) is run as K rows, the anchor first: K = block_size, with the engines' facts
    on what another K did."""
    if block.anchor_drafts:
        return _anchor_first_size(block, k)
    want = block.block_size - 1
    facts = SizeFacts(block.block_size, k)
    if k is None:
        return Finding(
            Kind.DRAFT_SHAPE,
            Severity.INFO,
            f"block_size {block.block_size}: serve it with num_speculative_tokens {want} (a round "
            f"runs the anchor and K masks, the block it was trained on)",
            None,
            facts,
        )
    if k == want:
        return Finding(
            Kind.DRAFT_SHAPE,
            Severity.INFO,
            f"block_size {block.block_size} and num_speculative_tokens {k}: the engine runs the "
            "block the draft was trained on",
            None,
            facts,
        )
    return Finding(
        Kind.DRAFT_SHAPE,
        Severity.WARNING,
        f"block_size {block.block_size} but num_speculative_tokens {k}: the engine runs blocks "
        f"of {k + 1} rows, the draft was trained on {block.block_size}",
        f"serve with num_speculative_tokens {want}",
        facts,
    )


def _anchor_first_size(block: BlockConfig, k: int | None) -> Finding:
    """DSpark's block size against K where the anchor's row drafts: the engine's block is K rows,
    so K must equal block_size (the engines' dated facts say what another K did)."""
    n = block.block_size
    seen = [
        f"{e.display} ({f.since}): {f.words}"
        for e in all_engines()
        for f in e.facts_for(None, block.family, "block_size")
    ]
    facts = SizeFacts(n, k)
    how = "every row drafts, the anchor's first, as sample_from_anchor says: K drafts take K rows"
    if k is None or k == n:
        said = ": serve it with" if k is None else " and"
        return Finding(
            Kind.DRAFT_SHAPE,
            Severity.INFO,
            f"block_size {n}{said} num_speculative_tokens {n} ({how}; the block it was trained on)",
            None,
            facts,
        )
    return Finding(
        Kind.DRAFT_SHAPE,
        Severity.ERROR,
        f"block_size {n} but num_speculative_tokens {k}: {how}, so the engine runs blocks of {k} "
        f"rows, the draft was trained on {n}" + "".join(f". {w}" for w in seen),
        f"serve with num_speculative_tokens {n}",
        facts,
    )


@dataclass(frozen=True)
class MaskFacts:
    mask_token_id: int
    source: str
    row_norm: float
    median_norm: float

    def to_dict(self) -> dict:
        return {
            "mask_token_id": self.mask_token_id,
            "embedding": self.source,
            "row_norm": self.row_norm,
            "median_row_norm": self.median_norm,
        }


def mask_finding(draft: Draft) -> Finding:
    """The mask token feeds every block row but the first: its embedding row must hold
    something (a target whose mask token was added and never trained may hold zeros there)."""
    block = draft.config.block
    assert block is not None
    w = draft.weights
    own = w.get("mask_embedding")
    row = own if own is not None else w["embed_tokens.weight"][block.mask_token_id]
    source = "mask_embedding.pt" if own is not None else "the target's embedding row"
    norms = w["embed_tokens.weight"].float().norm(dim=-1)
    median = float(norms.median())
    norm = float(row.float().norm())
    facts = MaskFacts(block.mask_token_id, source, norm, median)
    if norm == 0.0 or not bool(torch.isfinite(row).all()):
        return Finding(
            Kind.VOCAB_MAP,
            Severity.ERROR,
            f"mask token {block.mask_token_id}: {source} is "
            + ("zeros" if norm == 0.0 else "not finite")
            + ": every mask row of a block is fed nothing",
            f"ship the trained mask row (mask_embedding.pt beside the weights, as {_VLLM} reads "
            "it)",
            facts,
        )
    if norm < 0.1 * median:
        return Finding(
            Kind.VOCAB_MAP,
            Severity.WARNING,
            f"mask token {block.mask_token_id}: {source} has norm {norm:.3g}, under a tenth of "
            f"the median row's {median:.3g} (an untrained row?)",
            "check that the target's embedding holds the trained mask row",
            facts,
        )
    return Finding(
        Kind.VOCAB_MAP,
        Severity.INFO,
        f"mask token {block.mask_token_id}: {source} present (norm {norm:.3g}, median row "
        f"{median:.3g})",
        None,
        facts,
    )
