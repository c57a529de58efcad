"""ONNX Runtime GenAI: what the tool knows of it, in one place.

Read from the released `onnxruntime-genai` 0.18.0 wheel (its model builder,
`onnxruntime_genai/models/builder.py` and `models/builders/base.py`, `qwen.py`):

- The target is exported with the extra option `aux_hidden_state_layers=i,j,k`: entry i is the
  residual stream *entering* decoder layer i, which is HF index i (`output_hidden_states[i]`).
  The builder accepts 1 <= i < L only ("aux_hidden_state_layers [...] are outside [1, L); entry i
  is the residual stream entering decoder layer i."), so neither the embedding (HF 0) nor the
  last layer's output (HF L) can be fed.
- Its drafters are MTP heads and the block drafters DFlash 2 (`dflash2_path`) and DSpark
  (`dspark_path`). Their export reads the draft's `dflash_config.target_layer_ids` (SpecForge's
  ids: a layer's *output*, `hidden_states[id + 1]`) and requires the target's
  `aux_hidden_state_layers` to be each id plus one, refusing anything else ("The DFlash 2 drafter
  needs aux_hidden_state_layers=6,20,34 on the main model, got '5,19,33'."); ids must lie in
  [0, L-1). The release notes date this check to 2026-09-05 and DSpark's support to the same +1.
- No release runs an EAGLE-3 drafter: the aux states are exported "for an EAGLE3/DFlash-style
  drafter" that the user's own loop runs. For an EAGLE-3 draft the tool says which
  `aux_hidden_state_layers` feed the trained wiring and that no accept length of this engine can
  be replayed or held (there is nothing to count).
- Its statistics come from `generator.get_speculative_stats()` (drafted and accepted tokens), not
  from a log line or Prometheus counters.
"""

from __future__ import annotations

from collections.abc import Sequence

from inspector.engines.base import ServingEngine
from inspector.engines.ids import Engine
from inspector.engines.reading import DFLASH_IDS, Reader
from inspector.engines.release import Release

RELEASE = Release("0.18.0")
LABEL = f"ONNX Runtime GenAI {RELEASE}"
OPTION = "aux_hidden_state_layers"

READERS = (
    Reader(
        Engine.ORT_GENAI,
        str(RELEASE),
        "model builder, a block drafter's export (dflash2_path / dspark_path)",
        ((DFLASH_IDS, 1),),
        (),
        "onnxruntime_genai/models/builders/qwen.py (the +1 check), models/builders/base.py "
        "(the taps: the residual entering layer i, 1 <= i < L)",
        taps="it taps the residual entering layer i",
        drafts=frozenset({"dflash2", "dspark"}),
        first_tap=1,
        taps_last=False,
        no_ids="its export stops: the checkpoint must define at least one target_layer_ids entry",
    ),
)

CONVENTIONS = {
    "rounds": "not logged: generator.get_speculative_stats() gives drafted and accepted tokens",
    "logged_as": "none held: no release runs an EAGLE-3 drafter",
    "per_sample": "none",
}


def aux_layers(hf: Sequence[int]) -> list[int]:
    """The `aux_hidden_state_layers` that feed HF indices `hf` (entry i is HF index i)."""
    return [int(k) for k in hf]


def export_problem(target_layer_ids: Sequence[int], num_layers: int) -> str | None:
    """Why its block-drafter export refuses SpecForge-style `target_layer_ids` on a target of
    `num_layers` layers (None: it takes them, with aux_hidden_state_layers = ids + 1)."""
    if not target_layer_ids:
        return "the checkpoint must define at least one target_layer_ids entry"
    bad = [i for i in target_layer_ids if not 1 <= i + 1 < num_layers]
    if bad:
        return (
            f"it targets decoder layers {bad}, whose outputs the exporter cannot expose; "
            f"target_layer_ids must lie in [0, {num_layers - 1})"
        )
    return None


def launch(k: int) -> str:
    return (
        "python -m onnxruntime_genai.models.builder -m TARGET -o OUT -p fp16 -e cuda "
        f"--extra_options {OPTION}=IDS  # then your drafting loop, {k} tokens per round"
    )


ENGINE = ServingEngine(
    id=Engine.ORT_GENAI,
    display="ONNX Runtime GenAI",
    aliases=("ort-genai", "ortgenai", "ort", "onnxruntime-genai", "onnxruntime_genai", "onnx"),
    releases=(RELEASE,),
    readers=READERS,
    shape_rule=None,
    trees=False,
    overlap_round=False,
    caps_at_remaining=False,
    default_verify="vllm-onehot",
    counter_prefix=None,
    conventions=CONVENTIONS,
    launch=launch,
    runs_eagle3=False,
)
