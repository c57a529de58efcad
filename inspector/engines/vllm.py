"""vLLM: what the tool knows of it, in one place.

- Reading: the V1 model runner reads the top-level `eagle_aux_hidden_state_layer_ids`, then
  `dflash_config.target_layer_ids` (+1: a DFlash id is a layer's output), then
  `eagle_config.eagle_aux_hidden_state_layer_ids`, all as HF indices (0 = embedding, i = the input
  of layer i); without ids it feeds (2, L//2, L-3). Model runner V2 (VLLM_USE_V2_MODEL_RUNNER=1)
  reads the top level, `dflash_config`, `target_layer_ids` (+1) and `eagle_config.layer_ids`,
  never `eagle_config.eagle_aux_hidden_state_layer_ids`. `norm_before_residual` defaults to true in
  a speculators config and false in a plain one.
- Counting (V1 scheduler, 0.32-0.33): per verification round `num_accepted = len(generated) - 1`
  is recorded before the output is cut at EOS / max_tokens. "Mean acceptance length" = 1 +
  num_accepted_tokens / num_drafts; the log line covers one stats interval (reset after each
  line); the Prometheus counters `vllm:spec_decode_num_drafts`, `..._num_accepted_tokens` (and
  `..._per_pos`) are cumulative. Per request, `spec_decode_metrics.per_step_accepted` lists every
  round's count. It drafts chains only.
- Verification at temperature > 0: the draft's one-hot proposal against the target's
  distribution (`vllm-onehot`).
"""

from __future__ import annotations

from collections.abc import Callable

from inspector.engines.base import Fact, KnownFault, ServingEngine
from inspector.engines.capture import (
    LLAMA_CPP,
    LLAMA_CPP_KEY,
    TOP_LEVEL,
    CaptureRelease,
    EngineCapture,
    engine_default_hf,
    finish,
)
from inspector.engines.ids import Engine
from inspector.engines.reading import (
    DFLASH_IDS,
    NESTED,
    NESTED_LAYER_IDS,
    SPECULATORS_TRUE,
    TARGET_IDS,
    TOP,
    Reader,
)
from inspector.engines.release import Release
from inspector.engines.shapes import DraftShape, Support, Verdict, n_key_fix

RELEASE = Release("0.32")
# the build CI runs, as its start-up line states it (the CPU wheel)
CPU_WHEEL = Release("0.32.0")
LABEL = f"vLLM {RELEASE}"
# vLLM 0.32's norm flags (both model runners load the draft the same way)
NORMS = (
    ("norm_before_residual", SPECULATORS_TRUE, True),
    ("norm_before_fc", "config", False),
    ("fc_norm", "config", False),
    ("norm_output", "config", False),
)
# the capture that reads HF 0 (the embedding) and HF L (the last layer's output): older releases
# tapped the residual of layers 1..L-1 only and crashed on id 0
MIXIN_PR = "vllm-project/vllm PR #36063"

READERS = (
    Reader(
        Engine.VLLM,
        str(RELEASE),
        "V1 model runner",
        ((TOP, 0), (DFLASH_IDS, 1), (NESTED, 0)),
        NORMS,
        "vllm/v1/worker/gpu_model_runner.py (ids), model_executor/models/interfaces.py "
        "(default), transformers_utils/configs/speculators/algos.py and "
        "model_executor/models/llama_eagle3.py (norms)",
    ),
    Reader(
        Engine.VLLM,
        str(RELEASE),
        "model runner V2, VLLM_USE_V2_MODEL_RUNNER=1",
        ((TOP, 0), (DFLASH_IDS, 1), (TARGET_IDS, 1), (NESTED_LAYER_IDS, 0)),
        NORMS,
        "vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py: it never reads "
        "eagle_config.eagle_aux_hidden_state_layer_ids",
        tag="MRV2",
    ),
    Reader(
        Engine.VLLM,
        str(RELEASE),
        "DFlash draft",
        (
            (TOP, 0),
            (DFLASH_IDS, 1),
            ("dspark_target_layer_ids", 1),
            (TARGET_IDS, 1),
            ("dflash_config.layer_ids", 0),
            (NESTED_LAYER_IDS, 0),
        ),
        (),
        "vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py get_eagle3_aux_layers_from_config "
        "(the first key set wins; DFlash's ids + 1), model_executor/models/qwen3_dflash.py "
        "(qwen3_dspark.py builds DSpark on the same model and ids)",
        drafts=frozenset({"dflash", "dflash2", "dspark"}),
    ),
)

CONVENTIONS = {
    "rounds": "verification rounds with drafts (vllm:spec_decode_num_drafts)",
    "logged_as": (
        "vLLM 'Mean acceptance length' (one stats interval: equal when one interval "
        "covers the run) and 1 + vllm:spec_decode_num_accepted_tokens / "
        "vllm:spec_decode_num_drafts (Prometheus, cumulative)"
    ),
    "per_sample": "accepted: each round's count, vLLM's spec_decode_metrics.per_step_accepted",
}

FACTS = (
    Fact(
        "PR #46973, merged 2026-06-28 (supersedes #46788)",
        "vLLM's deepseek_v2-family model files capture the final layer's output (HF L) for an "
        "id equal to the layer count; releases before it fed nothing there",
        ("deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", "kimi_k3", "glm_moe_dsa"),
        last_id=True,
    ),
    Fact(
        "issue #50815, open since 2026-08-03",
        "on Kimi-K3 an id equal to the layer count is captured before the attn_res fold: the "
        "draft is fed a state it was not trained on (write L-1, or train on the folded state)",
        ("kimi_k3",),
        last_id=True,
    ),
    Fact(
        "PR #48113, 2026-07-09",
        "vLLM adds 1 to DFlash target_layer_ids (an id is a layer's output): a config written "
        "with HF indices is fed the next layer, and an id of L-1 asks for a state past the last",
        drafts="dflash",
    ),
    Fact(
        "PR #46435, 2026-06-23",
        "vLLM releases before it build a draft_id_to_target_id map whenever draft_vocab_size "
        "differs from the target config's vocab_size, padding included: a draft whose head "
        "covers the target's whole real vocabulary without a d2t (152064 rows against a padded "
        "152576) was served through a map it does not have, at accept length 1.00",
        topic="vocab_map",
    ),
    Fact(
        "0.32.0's CPU build, measured in CI against the demo's DFlash draft",
        "vLLM's CPU build normalises every DFlash layer's context keys with layer 0's k_norm "
        "(qwen3_dflash.py `_normalize_context_k` stacks the layers' k_norm weights into one "
        "tensor for one rms_norm call; the CPU kernel reads its first row only): a draft whose "
        "layers' k_norms differ proposes otherwise than trained there, with no error",
        drafts="dflash",
        topic="numerics",
    ),
    Fact(
        "issue #41834, comment 2026-08-01",
        "its DSpark runner drafts from the anchor's row, so a round runs num_speculative_tokens "
        "rows (v1/worker/gpu/spec_decode/dspark/speculator.py); DeepSeek-V4-Flash's DSpark draft "
        "(dspark_block_size 5) accepted 1.31 tokens a round at the model card's K = 7 and 2.74 "
        "at K = 5 (vllm-ascend #13640 reports 2.91 at K = 7: the collapse may be this engine's)",
        drafts="dspark",
        topic="block_size",
    ),
)


CPU_EXPAND = KnownFault(
    Engine.VLLM,
    "cpu",
    frozenset({str(CPU_WHEEL)}),
    True,
    "its verification at a temperature divides the target's logits by uninitialised memory "
    "(the CPU expand kernel writes the requests' temperatures into a copy it never reads back)",
    f"vLLM's CPU build {CPU_WHEEL} verifies sampled requests with garbage temperatures: "
    "`utils/cpu_triton_utils.py` `_expand_kernel_impl` casts its float32 output to int64, the "
    "C++ op writes the expanded temperatures (and top-k / top-p) into that copy and nothing "
    "copies them back, so the target's probabilities at the drafted positions are NaN or "
    "meaningless and nearly every draft is rejected (top_k crashes it). Greedy batches "
    "skip that code: rerun the same requests at temperature 0, where the engine must match "
    "the replay count for count, or serve on a GPU build",
)


def _capture(key: str, mixin: bool) -> Callable[[list[int] | None, str | None, int], EngineCapture]:
    """vLLM reads the top-level key first, then eagle_config, both as HF indices; with the
    EagleModelMixin capture (MIXIN_PR) it reaches HF 0..L, before it the residual of 1..L-1."""

    def capture(ids: list[int] | None, convention: str | None, L: int) -> EngineCapture:
        notes: list[str] = []
        fatal: str | None = None
        if ids is None:
            wanted, source = engine_default_hf(L), "vLLM default (2, L//2, L-3)"
        else:
            where = {TOP_LEVEL: "top-level", LLAMA_CPP: f"GGUF {LLAMA_CPP_KEY}"}.get(
                convention or "", "eagle_config"
            )
            wanted, source = list(ids), f"{where} ids {ids}, read as HF indices"
        if mixin:
            reach = range(0, L + 1)
        else:
            reach = range(1, L)
            if 0 in wanted:
                fatal = (
                    "vLLM before PR #36063 crashes on id 0 (the embedding: no residual before "
                    "layer 0); it needs the EagleModelMixin capture"
                )
            if L in wanted:
                notes.append(f"id {L} (last layer) is never reached before PR #36063")
        return finish(key, ids, wanted, source, reach, notes, fatal, L)

    return capture


CAPTURES = (
    CaptureRelease("vllm", _capture("vllm", True), "vLLM", 0),
    CaptureRelease("vllm-pre36063", _capture("vllm-pre36063", False)),
)


def launch(k: int) -> str:
    return (
        "vllm serve TARGET --speculative-config "
        f'\'{{"method": "eagle3", "model": "DRAFT", "num_speculative_tokens": {k}}}\''
    )


def shape_rule(shape: DraftShape) -> Verdict | None:
    """vLLM 0.32.0: model_executor/models/llama_eagle3.py and qwen3_eagle3.py
    build fc from the draft config; transformers_utils/configs/speculators/algos.py maps a
    speculators config (model_type llama or qwen3 only)."""
    if shape.layer == "mla":
        return None  # Eagle3DeepseekV2ForCausalLM: not run here
    src = f"vLLM {CPU_WHEEL} llama_eagle3.py, qwen3_eagle3.py, speculators/algos.py"
    if shape.layer == "qwen3" and not shape.speculators:
        return None  # a plain config names its own architecture: not run here
    # the Llama class sizes fc from num_aux_hidden_states, else eagle_config's ids, else 3;
    # the Qwen3 class reads the top-level ids too
    order = ["num_aux_hidden_states", "eagle_config"]
    if shape.layer == "qwen3":
        order = ["num_aux_hidden_states", "top", "eagle_config"]
    n = next((shape.n_stated[k] for k in order if k in shape.n_stated), 3)
    if n != shape.slots:
        found = next((k for k in order if k in shape.n_stated), None)
        read = f"{found} gives {n}" if found else "no num_aux_hidden_states, no eagle_config ids"
        return Verdict(
            LABEL,
            Support.REFUSES,
            (
                f"it sizes fc for {n} slots ({read}"
                + ("" if "top" in order else "; the top-level ids are not read for this")
                + f") and stops at loading fc.weight, which takes {shape.slots}",
            ),
            n_key_fix(shape),
            src + " (run)",
        )
    return Verdict(LABEL, Support.SERVES, source=src + " (run)")


# sentences reports quote about vLLM (`Engine.VLLM.says(key)`)
SAYS = {
    # where it reads a draft's layer ids (the serving config's notes)
    "reads_ids": "vLLM reads the top-level key first, then eagle_config",
    # a draft that ships no lm_head, or ships one unlike the target's (the doctor's lm_head check)
    "no_head": (
        "vLLM shares the target's lm_head with a draft that ships none (before vllm#28549 it "
        "replaced every draft's head with the target's)"
    ),
    "shared_head": "vLLM, which shares the target's head only with a draft that ships none",
    "replaced_head": "vLLM before vllm#28549, vllm#27732",
    # its CPU build's sampled verification (CPU_EXPAND), as a reconcile verdict words it
    "cpu_sampling": (
        f"vLLM's CPU build {RELEASE} writes the expanded temperatures into a copy it never reads "
        "back: NaN probabilities reject every draft, and top_k crashes it"
    ),
}


ENGINE = ServingEngine(
    id=Engine.VLLM,
    display="vLLM",
    aliases=("vllm",),
    releases=(RELEASE,),
    readers=READERS,
    shape_rule=shape_rule,
    trees=False,
    overlap_round=False,
    caps_at_remaining=False,
    default_verify="vllm-onehot",
    counter_prefix="vllm",
    conventions=CONVENTIONS,
    launch=launch,
    captures=CAPTURES,
    synthetic_off="rejection_sample_method 'standard'",
    steps_flag="num_speculative_tokens",
    known_faults=(CPU_EXPAND,),
    facts=FACTS,
    says=SAYS,
    # qwen3_dflash2 (0.32) multiplies the block's embedding rows by the config's
    # input_embedding_scale; qwen3_dflash (DFlash) embeds them as they are
    embedding_scale_read=frozenset({"dflash2"}),
    block_embedding_own=(1.0, "its DFlash model class reads no input_embedding_scale"),
)
