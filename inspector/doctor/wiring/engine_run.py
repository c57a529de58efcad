"""What an engine runs: the one answer every command asks (`accept`, `accept --live`,
`reconcile`, `doctor`, the app).

An engine runs a draft that may differ from the one its weights make:

- the flags it ignores or defaults otherwise (`engine_reading`'s norm rows: SGLang 0.5.23 reads
  `norm_before_residual` nowhere and always adds the raw fc output as the residual; vLLM's
  speculators reader takes an absent `norm_before_residual` as true);
- the features it runs the draft without (`shape_support`: SGLang without a Qwen3 layer's q/k
  norms, llama.cpp without norm_output);
- the layers it feeds: the ids it reads from where, with its +1 rules (`engine_reading`), in its
  order (llama.cpp: as listed), and the blocks it feeds nothing (llama.cpp: an id equal to the
  layer count on a Llama-family target), which the draft computes with those fc columns zeroed.

`engine_run` gathers the three; `EngineRun.draft` is the draft the engine runs and
`EngineRun.feed` the wiring (and draft) that replays its feed over a set of slots. Pure of the
views: no Rich, no Textual.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from inspector.doctor.checks.draft_shape import as_engine_runs
from inspector.doctor.wiring.engine_reading import (
    EngineRead,
    engine_reads,
    primary_reader,
    reader_norms,
)
from inspector.doctor.wiring.fed_states import (
    can_silence,
    fed_label,
    silenced,
    silent_blocks,
    slots_fed,
)
from inspector.doctor.wiring.named import engine_config_of
from inspector.draft import Draft
from inspector.engines import Engine, engine_id
from inspector.engines.shapes import Verdict
from inspector.sample import SlotInfo
from inspector.wiring import Wiring

# the config flags an engine's reading sets on the draft it runs (the others are tensors'
# business: a flag without its tensors is the shape rules')
RUN_FLAGS = ("norm_before_residual",)


@dataclass(frozen=True)
class FlagChange:
    """A flag the engine runs with another value than the draft's config gives the weights."""

    flag: str
    value: bool  # what the engine runs with
    how: str  # why ("read nowhere: it runs without it", "absent: its default true (...)")

    def words(self) -> str:
        return f"{self.flag} = {str(self.value).lower()} ({self.how})"


@dataclass(frozen=True)
class EngineRun:
    """One engine release on one draft: the draft it runs and the layers it feeds."""

    engine: Engine
    draft: Draft  # as the engine runs it
    flags: tuple[FlagChange, ...] = ()
    shape: Verdict | None = None  # the shape rule's verdict where it drops a feature
    read: EngineRead | None = None  # its reading of the config (None: no config, no layer count)
    who: str = ""  # the release as reports name it ("SGLang 0.5.23")

    @property
    def changed(self) -> bool:
        """The engine runs another draft than the weights make."""
        return bool(self.flags) or self.shape is not None

    @property
    def fed(self) -> tuple[int | None, ...] | None:
        """The HF index reaching each fc block (None: a block fed nothing); None when unknown."""
        return self.read.fed if self.read is not None else None

    def notes(self) -> list[str]:
        """One line per way the engine's draft differs from the weights'."""
        out = []
        if self.shape is not None:
            out.append(
                f"{self.shape.engine} runs this draft without {self.shape.dropped} "
                f"({'; '.join(self.shape.why)})"
            )
        who = self.who or self.engine
        for f in self.flags:
            out.append(f"{who} runs this draft with {f.words()}")
        return out

    def feed(self, infos: Sequence[SlotInfo]) -> tuple[Wiring, Draft, str] | None:
        """(the wiring that replays what the engine feeds over `infos`, the draft that runs it,
        its label): a block fed nothing is replayed with its fc columns zeroed. None where the
        feed is unknown, the slots lack a fed layer, or a zero block cannot be replayed (one
        norm over the whole concatenation)."""
        fed = self.fed
        if fed is None:
            return None
        slots = slots_fed(fed, infos)
        if slots is None:
            return None
        blocks = silent_blocks(fed)
        if blocks and not can_silence(self.draft):
            return None
        draft = silenced(self.draft, blocks) if blocks else self.draft
        assert self.read is not None
        return Wiring(slots), draft, f"{self.read.reader.label} feeds {fed_label(fed, infos)}"


def flag_changes(
    draft: Draft, engine: str, read: tuple[dict | None, bool] | None = None
) -> tuple[FlagChange, ...]:
    """The run flags `engine`'s primary reader takes otherwise than the draft's config. `read`:
    `engine_config_of(draft)` where the caller has it (the config is read once)."""
    raw, gguf = read if read is not None else engine_config_of(draft)
    reader = primary_reader(engine, gguf=gguf)
    if reader is None or raw is None:  # no file the engine would read: nothing to say
        return ()
    out = []
    for flag, value, how in reader_norms(reader, raw):
        if flag in RUN_FLAGS and value != getattr(draft.config, flag):
            out.append(FlagChange(flag, value, how))
    return tuple(out)


def engine_run(
    draft: Draft, engine: str, *, num_layers: int | None = None, target: object = None
) -> EngineRun:
    """The draft `engine` (any spelling the registry reads) runs, and
    with `num_layers` (the target's) the layers it feeds (`target`: the target's class, for
    SGLang's +1 rule)."""
    engine = engine_id(engine)
    served, verdict = as_engine_runs(draft, engine)
    raw, gguf = engine_config_of(draft)
    flags = flag_changes(draft, engine, (raw, gguf))
    if flags:
        cfg = served.config
        served = replace(served, config=replace(cfg, **{f.flag: f.value for f in flags}))
    read = None
    reader = primary_reader(engine, gguf=gguf)
    if raw is not None and num_layers is not None and reader is not None:
        reads = engine_reads(
            raw,
            num_layers,
            draft.config.num_fc_blocks,
            target=target,
            gguf=gguf,
            readers=(reader,),
        )
        read = reads[0] if reads else None  # a reader of other drafts' configs reads nothing
    who = f"{engine.display} {reader.version}" if reader is not None else engine.display
    return EngineRun(engine, served, flags, verdict, read, who)


def engine_run_notes(run: EngineRun) -> list[str]:
    """One note per way the draft an engine runs is another than the weights': the figures are
    that draft's (what every command that replays an engine's run prints before its figures)."""
    return [
        f"{line}: the figures are that draft's, as the engine logs them "
        "(eagle-inspect doctor: draft_shape, engine_feeds)"
        for line in run.notes()
    ]
