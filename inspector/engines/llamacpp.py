"""llama.cpp (`llama-server`): what the tool knows of it, in one place.

- Reading: `convert_hf_to_gguf.py` reads the top-level `eagle_aux_hidden_state_layer_ids` only
  (no ids: [2, L//2, L-3]) and bakes them into the GGUF as `eagle3.target_layers`; the eagle3
  graph captures the *input* of layer i for id i (HF index i) and concatenates the states in the
  order the ids are listed. An id equal to the layer count feeds nothing on targets whose graph
  sets no final state (Llama, Mistral, Qwen2/3, LFM2, MiniMax): zeros, or what an earlier request
  left in the buffer. The norm flags are read from config.json, written to the GGUF, and read
  back; an absent flag is false.
- Counting (`llama-server`, the commit vendored by llama-cpp-python's sdist): the prefill's
  token first (as vLLM); each round drafts at most min(k, remaining - 1) tokens, with remaining =
  max new tokens - tokens generated (`get_n_draft_max`); a round where that is <= 0 drafts
  nothing and is a plain decode, and only rounds that verified a draft are counted
  (`n_draft_verif_steps`). Per request it logs "mean len = 1 + accepted / steps"; `/metrics` has
  `llamacpp:spec_decode_num_{drafts,draft_tokens,accepted_tokens}_total` and
  `..._num_accepted_tokens_per_pos_total{position="i"}` (vLLM's schema). A request's last round
  therefore never drafts past max tokens; where the request stopped by EOS its max tokens are not
  known and the round drafts k. It drafts chains only.
- Verification at temperature > 0: the draft's argmax, accepted while the target's own sample
  equals it.
"""

from __future__ import annotations

from inspector.engines.base import Fact, ServingEngine
from inspector.engines.ids import Engine
from inspector.engines.reading import TOP, Reader
from inspector.engines.release import Release
from inspector.engines.shapes import DraftShape, Drop, Support, Verdict

RELEASE = Release("0c1e570", commit=True, vendored_by="llama-cpp-python 0.3.36")
LABEL = f"llama.cpp {RELEASE}"
GGUF_IDS = "eagle3.target_layers"
TAPS = "llama.cpp captures the input of layer i"

READERS = (
    Reader(
        Engine.LLAMACPP,
        str(RELEASE),
        "convert_hf_to_gguf.py, then the eagle3 graph",
        ((TOP, 0),),
        (
            ("norm_before_residual", "config.json, written to the GGUF", False),
            ("norm_before_fc", "config.json, written to the GGUF", False),
        ),
        f"llama.cpp {RELEASE.words} conversion/llama.py (ids: top level only; norms), "
        "src/models/eagle3.cpp (norm keys read back), the input of layer i captured",
        last_feeds_nothing=True,
        as_listed=True,
        tag="converted",
        taps=TAPS,
    ),
    Reader(
        Engine.LLAMACPP,
        str(RELEASE),
        f"a GGUF's baked {GGUF_IDS}",
        ((GGUF_IDS, 0),),
        (
            ("norm_before_residual", "GGUF", False),
            ("norm_before_fc", "GGUF", False),
        ),
        f"llama.cpp {RELEASE} src/models/eagle3.cpp, the input of layer i captured",
        last_feeds_nothing=True,
        as_listed=True,
        gguf=True,
        tag="GGUF",
        taps=TAPS,
    ),
)

CONVENTIONS = {
    "rounds": (
        "verification steps with a draft (llama-server n_draft_verif_steps): each round "
        "drafts min(k, remaining - 1) tokens, a round with no room is a plain decode and "
        "not counted"
    ),
    "logged_as": (
        "llama-server's per-request 'mean len' (1 + accepted / steps) and 1 + "
        "llamacpp:spec_decode_num_accepted_tokens_total / "
        "llamacpp:spec_decode_num_drafts_total (/metrics, cumulative)"
    ),
    "per_sample": "accepted: each counted round's accepted draft tokens",
}


def launch(k: int) -> str:
    return (
        "llama-server -m TARGET.gguf -md DRAFT.gguf --spec-type draft-eagle3 "
        f"--spec-draft-n-max {k}"
    )


def shape_rule(shape: DraftShape) -> Verdict | None:
    """llama.cpp @0c1e570 (llama-cpp-python 0.3.36): conversion/llama.py (what the
    converter detects and maps) and src/models/eagle3.cpp (what the graph reads). Each
    refusal below is the message llama.cpp printed here on a draft of that shape."""
    if shape.layer == "mla":
        return None
    src = f"llama.cpp {RELEASE} conversion/llama.py, src/models/eagle3.cpp (run)"
    why = []
    if shape.layers != 1:  # not taken for EAGLE-3: converted as a plain Llama, which has no d2t
        why.append(
            "its converter takes a draft for EAGLE-3 only with num_hidden_layers 1, and stops "
            "on the rest: \"Can not map tensor 'd2t'\""
        )
    if shape.fc_norm:
        why.append("its converter stops: \"Can not map tensor 'fc_norm.0.weight'\"")
    if shape.layer == "qwen3":
        why.append(
            'its converter stops on the q/k norms: "Can not map tensor '
            "'model.layers.0.self_attn.k_norm.weight'\""
        )
    if shape.slots != 3 and not why:  # reached only past the converter
        why.append(
            'llama-server stops at loading it: "EAGLE3 requires exactly 3 entries in '
            "'extract_layers'\""
        )
    if why:
        fix = "serve it on vLLM" + ("" if shape.layer == "qwen3" else " or SGLang")
        return Verdict(LABEL, Support.REFUSES, tuple(why), fix, src)
    if shape.norm_output:
        return Verdict(
            LABEL,
            Support.DROPS,
            (
                "neither its converter nor its graph reads it: every drafting step after the "
                "first is fed the pre-norm output",
            ),
            "serve it on vLLM or SGLang, which apply norm_output",
            src,
            drops=(Drop.NORM_OUTPUT,),
        )
    return Verdict(LABEL, Support.SERVES, source=src)


# dated facts (`Fact`): which backend or build a figure came from matters (`reconcile_runs`)
FACTS = (
    Fact(
        "issue #26750, 2026-08-08",
        "one build's MTP acceptance was 35.8% on CUDA against 92.2% on Vulkan, and 84.0% fell to "
        "51.3% between two CUDA builds: the same draft and requests, another backend or build",
        topic="backend",
    ),
)


ENGINE = ServingEngine(
    id=Engine.LLAMACPP,
    display="llama.cpp",
    aliases=("llamacpp", "llama.cpp", "llama-cpp", "llama_cpp", "llama-server"),
    releases=(RELEASE,),
    readers=READERS,
    shape_rule=shape_rule,
    trees=False,
    overlap_round=False,
    caps_at_remaining=True,
    default_verify="llamacpp-target-only",
    counter_prefix="llamacpp",
    conventions=CONVENTIONS,
    launch=launch,
    request_rounds=False,
    bakes_ids=True,
    steps_flag="--spec-draft-n-max",
    facts=FACTS,
)
