"""The paths a trace compares: the draft as its trainer computed it and as each engine runs it.

A path is a draft (with the config, scale and dtype that path computes with), the slots it feeds
in fc block order, and the shift between tokens and features; its `differences` against the
trained path say what each changes and at which stage it first acts (`CAUSES`), so that the
comparison can name the cause of a parting.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import torch

from inspector.draft import Draft
from inspector.sample import SlotInfo
from inspector.wiring import Wiring, layers_wiring

EMBEDDING_SCALE = "embedding scale"
NORM_FLAG = "norm flag"
DTYPE = "dtype"
VOCAB_MAP = "vocabulary map"
SHIFT = "shift"
WIRING = "wiring"
DROPPED = "dropped feature"
CAUSES = (EMBEDDING_SCALE, NORM_FLAG, DTYPE, VOCAB_MAP, SHIFT, WIRING, DROPPED)

ANY_STAGE = ""  # a difference that acts everywhere (a dtype): named where no other one acts


@dataclass(frozen=True)
class Difference:
    """One way a path computes otherwise than the trained one."""

    cause: str  # one of CAUSES
    words: str  # what it does, for the report
    acts_at: str  # the first stage it changes (ANY_STAGE: every stage)

    def to_dict(self) -> dict:
        return {"cause": self.cause, "words": self.words, "acts_at": self.acts_at or None}


@dataclass(frozen=True)
class TracePath:
    label: str
    draft: Draft  # as this path runs it
    wiring: Wiring  # the slots it feeds, fc block order
    shift: int = 1  # row j pairs the features at j with token x_{j+shift}
    differences: tuple[Difference, ...] = ()
    note: str | None = None  # what the path leaves out (the engine's own problem reading it)
    known: tuple[str, ...] = ()  # the engine's known numerics faults the path does not model


def feature_stage(draft: Draft) -> str:
    """The stage the fed features first reach: fc's output, or a block draft's context."""
    return "context" if draft.config.block is not None else "fc"


def residual_stage() -> str:
    return "layer0.residual"


def trained_path(draft: Draft, wiring: Wiring, trainer: str) -> TracePath:
    """The draft as its config and weights say, over the wiring it was trained on."""
    return TracePath(trainer, draft, wiring)


def with_dtype(path: TracePath, dtype: torch.dtype, why: str) -> TracePath:
    """`path` computed in `dtype` (a difference where that is not the trained path's)."""
    if dtype == path.draft.dtype:
        return path
    words = f"computes in {str(dtype).removeprefix('torch.')} ({why})"
    return replace(
        path,
        draft=path.draft.to(dtype=dtype),
        differences=(*path.differences, Difference(DTYPE, words, ANY_STAGE)),
    )


def with_shift(path: TracePath, shift: int, why: str) -> TracePath:
    """`path` pairing the features at row j with token x_{j+shift}."""
    if shift == path.shift:
        return path
    words = f"pairs the features at j with token x_(j+{shift}) ({why})"
    return replace(
        path, shift=shift, differences=(*path.differences, Difference(SHIFT, words, "embed"))
    )


def with_vocab_map(path: TracePath, d2t: torch.Tensor, why: str) -> TracePath:
    """`path` mapping draft ids to target ids by `d2t` (offsets) instead of the draft's own."""
    vocab = replace(path.draft.vocab, d2t=d2t.to(path.draft.vocab.d2t.device))
    if torch.equal(vocab.d2t, path.draft.vocab.d2t):
        return path
    return replace(
        path,
        draft=replace(path.draft, vocab=vocab),
        differences=(*path.differences, Difference(VOCAB_MAP, why, "target ids")),
    )


def with_wiring(path: TracePath, wiring: Wiring, words: str) -> TracePath:
    if wiring.slots == path.wiring.slots:
        return path
    stage = feature_stage(path.draft)
    return replace(
        path, wiring=wiring, differences=(*path.differences, Difference(WIRING, words, stage))
    )


def eagle3_engine_path(
    base: TracePath,
    engine: str,
    infos: Sequence[SlotInfo],
    *,
    num_layers: int | None = None,
    target: object = None,
) -> TracePath:
    """An EAGLE-3 draft as `engine` runs it (`doctor.wiring.engine_run`) on top of `base` (the
    trained path, or it in the dtype the engine loads): its flags, the features it drops, the
    layers it feeds where the target's layer count is known."""
    from inspector.doctor.wiring.engine_run import engine_run

    run = engine_run(base.draft, engine, num_layers=num_layers, target=target)
    who = run.who or str(run.engine)
    diffs: list[Difference] = []
    for f in run.flags:
        diffs.append(Difference(NORM_FLAG, f"runs {f.words()}", residual_stage()))
    if run.shape is not None:
        diffs.append(
            Difference(
                DROPPED,
                f"runs it without {run.shape.dropped} ({'; '.join(run.shape.why)})",
                "layer0.attn_out",
            )
        )
    # a reader that cannot load this layout (SGLang and a speculators config) runs the draft
    # once it is rewritten for it: that run is traced, and the line says so
    note = (run.read.problem or run.read.unsupported) if run.read is not None else None
    # `base`'s own differences (the dtype it computes in) stay: the engine runs on top of them
    all_diffs = (*base.differences, *diffs)
    path = TracePath(who, run.draft, base.wiring, base.shift, all_diffs, note)
    fed = run.feed(infos)
    if fed is not None:
        wiring, draft, label = fed
        path = with_wiring(replace(path, draft=draft), wiring, label)
    return path


def block_engine_paths(
    base: TracePath,
    config: Mapping,
    num_layers: int,
    infos: Sequence[SlotInfo],
    engines: Sequence[str] | None = None,
) -> list[TracePath]:
    """A block draft as each engine that reads its kind runs it: the layers its reading of the
    config feeds (where the samples hold them), and the scale it gives the block's embedding
    rows (`ServingEngine.block_embedding_scale`), on top of `base` (the trained path, or it in
    the dtype the engine loads, whose differences stay)."""
    from inspector.doctor.wiring.engine_reading import engine_reads
    from inspector.engines import engine as engine_of

    draft = base.draft
    block = draft.config.block
    assert block is not None
    out = []
    for r in engine_reads(config, num_layers, draft.config.num_fc_blocks, draft=block.family):
        eng = engine_of(r.reader.engine)
        if engines is not None and eng.id not in engines:
            continue
        known = tuple(
            f"{f.words} ({f.since})" for f in eng.facts_for(None, drafts="dflash", topic="numerics")
        )
        path = replace(base, label=r.reader.label, known=known)
        scale = eng.block_embedding_scale(block.family, block.input_embedding_scale)
        if scale is not None and scale[0] != block.input_embedding_scale:
            value, why = scale
            run = replace(
                draft,
                config=replace(draft.config, block=replace(block, input_embedding_scale=value)),
            )
            words = (
                f"scales the block's embedding rows by {value:g}, not the config's "
                f"input_embedding_scale {block.input_embedding_scale:g} ({why})"
            )
            scaled = Difference(EMBEDDING_SCALE, words, "embed")
            path = replace(path, draft=run, differences=(*path.differences, scaled))
        wiring = layers_wiring(tuple(r.fed), infos) if r.fed is not None else None
        if wiring is not None:
            path = with_wiring(path, wiring, f"feeds HF {list(r.fed or ())}")
        elif r.problem is not None:
            path = replace(path, note=r.problem)
        elif r.fed is not None:
            path = replace(path, note=f"its feed HF {list(r.fed)} is not in the samples")
        out.append(path)
    return out
