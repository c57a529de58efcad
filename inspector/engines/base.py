"""What the tool knows about one serving engine, behind one interface.

Each engine's module (`vllm`, `sglang`, `llamacpp`, `ort_genai`) builds one `ServingEngine`; the
registry (`inspector.engines`) holds them under `Engine`. The rest of the tool asks the engine
(`engine(e).overlap_round`, `engine(e).readers`, `engine(e).shape_rule(shape)`) and never
compares an engine's name or version: a fact that changes with a release is written once, here.

Pure data and pure functions: no torch, no files."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from inspector.engines.capture import CaptureRelease
from inspector.engines.ids import Engine
from inspector.engines.reading import Reader
from inspector.engines.release import Release
from inspector.engines.shapes import DraftShape, Verdict


@dataclass(frozen=True)
class Fact:
    """A dated engine fact with its source: what a report says where it applies."""

    since: str  # the release, PR or date it holds from ("PR #46973, merged 2026-06-28")
    words: str
    applies_to: tuple[str, ...] = ()  # target model_types it concerns (empty: every target)
    drafts: str = "eagle3"  # the drafts whose ids it concerns ("eagle3", "dflash")
    last_id: bool = False  # it concerns an id equal to the target's layer count only
    # what of the draft it concerns: "layer_ids" (the ids it reads), "vocab_map" (d2t against
    # the target's vocabulary), "quantization" (the numerics it is run in), "backend" (which
    # backend or build served it), "hidden_state" (the target's state it hands the draft)
    topic: str = "layer_ids"


@dataclass(frozen=True)
class QuantInheritance:
    """An engine that runs the draft in the target's quantization unless told otherwise."""

    since: str  # the release or PR it holds from, with its source
    optout: str  # the launch setting that keeps the draft's own numerics
    projections: tuple[str, ...]  # the draft weights the target's method quantizes (name parts)
    words: str  # those weights in words, and what stays unquantized


@dataclass(frozen=True)
class KnownFault:
    """A fault of some builds of one engine on one device, under sampling or always."""

    engine: Engine
    device: str  # the start-up's device_config
    versions: frozenset[str]  # releases it was read and measured in
    sampled_only: bool  # greedy batches never reach the faulty code
    what: str  # the fault in a clause, for the summary
    detail: str  # the fault's class, with how to get a figure that says something

    def applies(self, engine: object, device: str, version: str, temperature: float) -> bool:
        """Whether a build of `engine` (its id) on `device` at `version`, as its start-up
        states them, has the fault at `temperature`."""
        return (
            engine == self.engine
            and device == self.device
            and version in self.versions
            and (temperature > 0 or not self.sampled_only)
        )


@dataclass(frozen=True)
class ServingEngine:
    """One engine: its identity, what it reads and feeds, what it serves, how it counts.

    releases: the releases whose facts are held, oldest first; the last is the one this project
      builds and runs (`release`).
    readers: its readings of a draft config, one row per release and reading path.
    shape_rule: what its release does with a draft's shape (None: no rule known).
    trees: drafts trees (topk > 1); the others draft chains.
    overlap_round: a request's stop is followed by one more counted round (SGLang's overlap
      scheduler, its default).
    caps_at_remaining: a round drafts at most the tokens left before max tokens, less one, and
      a round with no room is a plain decode (llama-server).
    default_verify: its rule at temperature > 0 (a `serving.sampling_settings.VerifyRule` value).
    counter_prefix: its Prometheus spec-decode family (`<prefix>:spec_decode_num_drafts`), None
      where it writes none.
    windowed_log: its accept-length log line covers a window of decode batches, not the run.
    tree_kv: its topk > 1 draft decode lets each beam row read its own KV (SGLang's
      approximation, a `serving.spec` KV mode), None where it drafts no trees.
    runs_eagle3: a release of it runs an EAGLE-3 draft (False: only its reading is held).
    request_rounds: a request's record holds its verification rounds (llama-server's timings
      give drafted and accepted tokens only).
    synthetic_off: the setting that turns its synthetic (forced) acceptance off.
    steps_flag: how its own settings name the draft length (None: the drafting settings' own
      flags, SGLang's).
    bakes_ids: the layer ids are baked into the served file at conversion (a GGUF): a fix is a
      reconversion.
    conventions: what each pooled figure of a report means under it, for the JSON.
    launch: the launch line for a draft of `k` speculative tokens (TARGET, DRAFT placeholders).
    captures: what each of its release lines captures for a config's ids (`capture --engine`).
    known_faults: builds known to verify wrong (a figure from one says nothing about the draft).
    facts: dated facts a report states where they apply.
    says: sentences reports quote about it, by key (what it reads, skips, borrows; its fix; its
      log line), so that the rest of the tool asks for the words instead of writing the engine's
      name (`Engine.X.says(key)`).
    """

    id: Engine
    display: str
    aliases: tuple[str, ...]
    releases: tuple[Release, ...]
    readers: tuple[Reader, ...]
    shape_rule: Callable[[DraftShape], Verdict | None] | None
    trees: bool
    overlap_round: bool
    caps_at_remaining: bool
    default_verify: str
    counter_prefix: str | None
    conventions: Mapping[str, str]
    launch: Callable[[int], str] | None = None
    windowed_log: bool = False
    tree_kv: str | None = None
    runs_eagle3: bool = True
    request_rounds: bool = True
    synthetic_off: str = ""
    bakes_ids: bool = False
    steps_flag: str | None = None
    known_faults: tuple[KnownFault, ...] = ()
    captures: tuple[CaptureRelease, ...] = ()
    facts: tuple[Fact, ...] = field(default_factory=tuple)
    # the block families whose `input_embedding_scale` it multiplies the block's input rows by
    # (None: not known); the others it runs at its own scale, `block_embedding_own`
    # runs the draft in the target's quantization unless its opt-out is given (None: the
    # draft runs as its own checkpoint states)
    quant_inheritance: QuantInheritance | None = None
    embedding_scale_read: frozenset[str] | None = None
    block_embedding_own: tuple[float, str] = (1.0, "")
    says: Mapping[str, str] = field(default_factory=dict)

    @property
    def release(self) -> Release:
        return self.releases[-1]

    @property
    def label(self) -> str:
        """The engine and its release as reports name them: "SGLang 0.5.23"."""
        return f"{self.display} {self.release}"

    @property
    def value(self) -> str:
        return self.id.value

    @property
    def plain_rounds(self) -> bool:
        """Whether it counts rounds as the evaluator's own walk does: no overlap round after a
        stop, no round capped at the room left (so eval's accept column is its figure)."""
        return not self.overlap_round and not self.caps_at_remaining

    @property
    def feeds_nothing_for_last(self) -> bool:
        """Whether an id equal to the layer count can feed an fc block nothing (llama.cpp)."""
        return any(r.last_feeds_nothing for r in self.readers)

    def block_embedding_scale(self, family: str, stated: float) -> tuple[float, str] | None:
        """(the scale it multiplies a `family` block draft's input rows by, why) for a config
        that states `stated`; None where the engine's rule is not known."""
        if self.embedding_scale_read is None:
            return None
        if family in self.embedding_scale_read:
            return stated, "reads input_embedding_scale"
        return self.block_embedding_own

    def primary_reader(self, *, gguf: bool = False) -> Reader | None:
        """The reading path a plain launch takes (the first row of its kind)."""
        return next((r for r in self.readers if r.gguf == gguf), None)

    def facts_for(
        self, model_type: str | None, drafts: str | None = None, topic: str = "layer_ids"
    ) -> tuple[Fact, ...]:
        """The facts on `topic` that concern a target of `model_type` (None: only those for
        every target) and, given `drafts`, that kind of draft."""
        return tuple(
            f
            for f in self.facts
            if f.topic == topic
            and (not f.applies_to or model_type in f.applies_to)
            and (drafts is None or f.drafts == drafts)
        )
