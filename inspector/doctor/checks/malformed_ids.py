"""Check: aux layer ids that name no wiring as written: a layer listed twice, an index below 0.

A config's ids are meant to name N distinct layers, one per fc block. A repeated id (`[2, 2, 4]`)
or a negative one (`[-1, 2, 4]`: SGLang's eagle_config way of naming the embedding, pasted where
vLLM reads HF indices) selects no wiring: each engine release does its own thing with it
(`engine_reading`). vLLM 0.32 captures a layer whose index is among the ids, each once, with no
negative indexing (vllm/model_executor/models/interfaces.py): fewer states than fc
blocks, a shape error when the draft first runs. SGLang's Llama file adds 1 to eagle_config ids,
so -1 there is the embedding (HF 0), not a fault; it reads no top-level ids at all. llama.cpp
feeds the state of each listed id in order, a repeat to two fc blocks, and has no layer below 0.

The loader keeps such ids as written (`formats.config.aux_layer_ids`); this module names what is
wrong with them and what each engine then feeds, and the wiring finding makes it its error case
(`wiring_check`: never "fits its configured wiring"), its fix the ids of the trained wiring.

Evidence: where the ids are, the ids, the repeated ones, the negative ones, one line per engine
reading (what it reads and feeds, or why it cannot serve the draft).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from inspector.doctor.checks.layer_ids import HF, SGLANG, IdSource
from inspector.doctor.wiring.engine_reading import EngineRead
from inspector.engines import Engine
from inspector.engines.vllm import LABEL as VLLM
from inspector.sample import SlotInfo
from inspector.wiring import Wiring

# the engines' names from the registry (a rename is one edit in inspector/engines/)
_LLAMACPP, _SGLANG, _VLLM = (
    Engine.LLAMACPP.display,
    Engine.SGLANG.display,
    Engine.VLLM.display,
)


@dataclass(frozen=True)
class MalformedIds:
    """The draft's ids (`where`, as written) and what makes them malformed; `feeds`: one line
    per engine reading, (engine label, what it feeds in words)."""

    where: str
    convention: str
    ids: tuple[int, ...]
    repeated: tuple[int, ...]  # ids listed more than once, each once
    negative: tuple[int, ...]  # ids below the convention's least (0; SGLang's eagle_config -1)
    feeds: tuple[tuple[str, str], ...]

    def to_dict(self) -> dict:
        return {
            "where": self.where,
            "convention": self.convention,
            "ids": list(self.ids),
            "repeated": list(self.repeated),
            "negative": list(self.negative),
            "engines": [{"engine": e, "feeds": words} for e, words in self.feeds],
        }

    def fault(self) -> str:
        """What is wrong with the ids, in words."""
        parts = []
        if self.repeated:
            rep = ", ".join(str(i) for i in self.repeated)
            parts.append(f"list {rep} twice" if len(self.repeated) == 1 else f"repeat {rep}")
        if self.negative:
            neg = ", ".join(str(i) for i in self.negative)
            words = f"name {neg}, below every layer index"
            if self.convention == HF:
                words += (
                    f" (read as HF indices, as {_VLLM} reads them: 0 is the embedding; -1 for it "
                    f"is {_SGLANG}'s eagle_config convention)"
                )
            parts.append(words)
        return " and ".join(parts)


def least_id(convention: str | None) -> int:
    """The least id a convention reads as a layer: SGLang's eagle_config -1 (the embedding)."""
    return -1 if convention == SGLANG else 0


def malformed_ids(
    draft: IdSource | None,
    reads: Sequence[tuple[EngineRead, tuple[int, ...] | None]],
    infos: Sequence[SlotInfo],
) -> MalformedIds | None:
    """The draft's ids when they repeat a layer or name one below 0 (None: well formed, or no
    ids); `reads`: each engine reading with the wiring it feeds (`named_wirings`)."""
    if draft is None:
        return None
    counts = Counter(draft.ids)
    repeated = tuple(i for i in dict.fromkeys(draft.ids) if counts[i] > 1)
    least = least_id(draft.convention)
    negative = tuple(i for i in dict.fromkeys(draft.ids) if i < least)
    if not repeated and not negative:
        return None
    feeds = tuple((r.reader.label, feed_words(r, w, infos, draft.ids)) for r, w in reads)
    return MalformedIds(draft.where, draft.convention, draft.ids, repeated, negative, feeds)


def feed_words(
    read: EngineRead,
    wiring: tuple[int, ...] | None,
    infos: Sequence[SlotInfo],
    ids: Sequence[int] = (),
) -> str:
    """What one engine reading makes of the ids (`ids`: the draft's, "them" where it reads
    those): what it reads, its note on a repeated or negative id, and what it feeds or why it
    cannot serve the draft."""
    if read.unsupported:
        return "does not load this config's layout (it reads eagle_config ids, after a rewrite)"
    if read.where is None:
        head = f"reads no ids where it looks: its default HF {list(read.hf or [])}"
    elif read.ids is not None and tuple(read.ids) == tuple(ids):
        head = "reads them"
    else:
        head = f"reads {read.where} {list(read.ids or [])}"
    notes = [n for n in read.notes if n.startswith(("id ", "ids "))]
    parts = list(notes)
    negative_noted = any("no layer" in n or "no such layer" in n for n in notes)
    if read.problem and not (negative_noted and "outside" in read.problem):
        parts.append(read.problem)
    elif not read.problem and wiring is not None:
        parts.append(f"it feeds {Wiring(wiring).label(infos)}")
    elif not read.problem and read.fed is not None:
        parts.append(f"it feeds HF {list(read.fed)}, which the samples do not all hold")
    return head + "".join(f"; {x}" if i else f": {x}" for i, x in enumerate(parts))


def no_layer_count_words() -> str:
    """What the engines do with such ids, where the target's layer count is unknown."""
    return (
        f"{VLLM} captures each listed layer once and no layer for a negative id (fewer states "
        f"than fc blocks: a shape error when the draft first runs); {_LLAMACPP} feeds each listed "
        f"id's state as listed, a repeat to two fc blocks; {_SGLANG} reads eagle_config's ids only "
        "(pass --target, or state num_hidden_layers in data_config.json, for each engine's row)"
    )


def feeds_text(m: MalformedIds) -> str:
    """Each engine's reading, in words."""
    if not m.feeds:
        return no_layer_count_words()
    return ". ".join(f"{engine} {words}" for engine, words in m.feeds)
