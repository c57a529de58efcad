"""One engine release's reading of a draft config: where it looks for the layer ids, what it adds
to them, and which norm flags it reads (with their defaults). The rows live in each engine's
module (`ServingEngine.readers`); `doctor.wiring.engine_reading` applies them to a config.

Pure data: no torch, no files."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from inspector.engines.ids import Engine

TOP = "eagle_aux_hidden_state_layer_ids"
NESTED = "eagle_config.eagle_aux_hidden_state_layer_ids"
TARGET_IDS = "target_layer_ids"
DFLASH_IDS = "dflash_config.target_layer_ids"
NESTED_LAYER_IDS = "eagle_config.layer_ids"
# a reader's shift that defers to SGLang's per-target-class model-file rule
SGLANG_MODEL_FILE = "sglang-model-file"
# vLLM's speculators reader defaults norm_before_residual to true, its plain reader to false
SPECULATORS_TRUE = "vLLM: true in a speculators config, false in a plain one"
NEVER = "read nowhere: it runs without it"  # a flag the reader never reads


@dataclass(frozen=True)
class Reader:
    """One engine release's reading of a draft config.

    keys: where it looks for the ids, in order (the first non-empty wins); `shift`: what it adds
      to ids found under each key (its index convention: the result is an HF
      `output_hidden_states` index, 0 = embedding, i = the input of decoder layer i, L = the
      last layer's output before the final norm); SGLANG_MODEL_FILE defers to SGLang's
      model-file rule.
    default: "2,L//2,L-3": what it feeds when it finds no ids.
    norms: flag -> (where it is read, its default when absent); absent flags are not read.
    last_feeds_nothing: an id equal to the layer count feeds no state (llama.cpp on Llama-family
      targets: there is no input of layer L).
    """

    engine: Engine
    version: str
    path: str  # the reading path in words ("V1 model runner", "converter", ...)
    keys: tuple[tuple[str, int | str], ...]
    norms: tuple[tuple[str, str, bool], ...]
    source: str
    last_feeds_nothing: bool = False
    # feeds the states in the order the ids are listed (llama.cpp concatenates them so); vLLM and
    # SGLang capture in layer order, ascending
    as_listed: bool = False
    gguf: bool = False  # reads a GGUF's baked ids, not a config.json
    tag: str = ""  # how the label tells two paths of one release apart
    reads_speculators: bool = True  # loads a speculators-layout config (speculators_config)
    # how its problems word the tap ("llama.cpp captures the input of layer i")
    taps: str = ""
    # the drafts whose configs it reads: EAGLE-3's, or a block drafter's ("dflash2", "dspark")
    drafts: frozenset[str] = frozenset({"eagle3"})
    # the HF indices it can tap: first_tap.. L, or ..L-1 where it cannot tap the last output
    first_tap: int = 0
    taps_last: bool = True
    # what happens without ids: None, it feeds its default [2, L//2, L-3]; else the problem
    no_ids: str | None = None
    # a block drafter's guess where a config names no ids: its ids (shifted as its first key's)
    # from (the target's layer count, the draft's num_hidden_layers); None: `no_ids` decides
    guess_ids: Callable[[int, int], list[int]] | None = None

    @property
    def label(self) -> str:
        return f"{self.engine.display} {self.version}" + (f" {self.tag}" if self.tag else "")
