"""SGLang: what the tool knows of it, in one place.

- Reading: the ids under `eagle_config.eagle_aux_hidden_state_layer_ids` only (never the top
  level, no speculators layout), handed to the *target's* model file, whose rule decides the +1
  (`sglang_model_files`); without ids it captures [2, L//2, L-3] with no +1. It reads
  `norm_before_residual` nowhere: a draft trained with it runs without it.
- Counting (0.5.x, `eagle_worker_v2`): `accept_lens = num_correct_drafts + 1` per round, never
  truncated. Its overlap scheduler (on by default) launches the next round before the previous
  one's result is read, so a request that ends by EOS, or by a round emitting several tokens that
  reaches max_new_tokens, runs and counts one more draft + verify after its stop (a request sure
  to end by length on its next token is skipped: output + 1 >= max_new_tokens before its last
  round). That round starts after the whole accepted path and bonus, and counts in the logs but
  not in the request's spec_verify_ct. The `accept len` log line ("Decode batch, ..., accept len:
  X.XX, accept rate: ...") covers 40 decode batches and resets; `avg_spec_accept_length` (server
  info `internal_states`) pools the completed 40-batch windows; a request's
  `meta_info.spec_accept_length` is completion_tokens / spec_verify_ct, the prefill's token
  included, the stop token too.
- Trees (topk > 1) are SGLang's alone; its draft decode lets each beam row read its own KV.
- Verification at temperature > 0: target-only sampling with its accept thresholds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from inspector.engines.base import Fact, QuantInheritance, ServingEngine
from inspector.engines.capture import (
    EAGLE_CONFIG,
    LLAMA_CPP,
    LLAMA_CPP_KEY,
    CaptureRelease,
    EngineCapture,
    engine_default_hf,
    finish,
)
from inspector.engines.ids import Engine
from inspector.engines.reading import (
    DFLASH_IDS,
    NESTED,
    NEVER,
    SGLANG_MODEL_FILE,
    TARGET_IDS,
    Reader,
)
from inspector.engines.release import Release
from inspector.engines.shapes import DraftShape, Drop, Support, Verdict

RELEASE = Release("0.5.23")
LABEL = f"SGLang {RELEASE}"
# the release whose model files first read explicit ids by their own rule ("since #25454");
# before it every explicit id got +1
IDS_PR = "sgl-project/sglang PR #25454"


def dflash_guess(num_target_layers: int, num_draft_layers: int) -> list[int]:
    """SGLang's guess of a DFlash draft's ids when its config names none
    (`srt/speculative/dflash_utils.py` `build_target_layer_ids`, a copy of the reference's
    spread): one id per draft layer over 1 .. L-3, L the *runtime* target's layer count (not the
    config's num_target_layers), float division rounded half to even; one draft layer: L // 2.
    Only a default: for a 64-layer target and 5 draft layers it is [1, 16, 31, 46, 61], where
    Qwen3.8-27B-DFlash2 was trained on [5, 19, 33, 47, 61]."""
    if num_draft_layers == 1:
        return [num_target_layers // 2]
    start, end = 1, num_target_layers - 3
    if end < start:  # SGLang raises: "DFlash layer selection requires num_target_layers >= 4"
        return []
    span = end - start
    return [
        int(round(start + (i * span) / (num_draft_layers - 1))) for i in range(num_draft_layers)
    ]


READERS = (
    Reader(
        Engine.SGLANG,
        str(RELEASE),
        "eagle_config only",
        ((NESTED, SGLANG_MODEL_FILE),),
        (
            ("norm_before_residual", NEVER, False),
            ("norm_before_fc", "eagle_config, else config", False),
            ("fc_norm", "config", False),
            ("norm_output", "config", False),
        ),
        "sglang/srt/model_executor/model_runner_components/spec_aux_hidden_state.py (ids), "
        "srt/models/llama.py (default), srt/models/llama_eagle3.py (norms; "
        "norm_before_residual is read nowhere); no speculators_config support anywhere in srt/",
        reads_speculators=False,
    ),
    Reader(
        Engine.SGLANG,
        str(RELEASE),
        "DFlash draft",
        ((DFLASH_IDS, 1), (TARGET_IDS, 1)),
        (),
        "srt/speculative/dflash_utils.py (parse_dflash_draft_config: dflash_config first, then "
        "the top level; build_target_layer_ids), model_runner_components/spec_aux_hidden_state.py "
        "(the guess over the runtime target's layers), srt/models/qwen3.py "
        "set_dflash_layers_to_capture (captures before layer id + 1)",
        taps="it captures the input of layer i",
        drafts=frozenset({"dflash", "dflash2"}),
        taps_last=False,
        guess_ids=dflash_guess,
    ),
)

CONVENTIONS = {
    "rounds": (
        "verify rounds, with the overlap scheduler's one more round after a request's stop "
        "(by EOS, or by a multi-token round reaching max_new_tokens)"
    ),
    "logged_as": (
        "SGLang avg_spec_accept_length (server info: pooled over completed 40-batch "
        "windows); its 'accept len' log line covers one 40-batch window"
    ),
    "per_sample": (
        "spec_accept_length: completion_tokens / spec_verify_ct, the prefill's token "
        "included, the round after the stop not (SGLang's meta_info)"
    ),
}


def hf_indices(ids: Sequence[int], *, since_25454: bool) -> list[int]:
    """HF index each explicit SGLang id selects, in list order (unreachable ones included):
    before IDS_PR every explicit id got +1; since, a list starting with 1 does."""
    shift = 1 if (not since_25454 or (len(ids) > 0 and ids[0] == 1)) else 0
    return [int(i) + shift for i in ids]


def _capture(key: str, since: bool) -> Callable[[list[int] | None, str | None, int], EngineCapture]:
    """SGLang reads eagle_config's ids only and captures before each layer (HF 0..L-1)."""

    def capture(ids: list[int] | None, convention: str | None, L: int) -> EngineCapture:
        notes: list[str] = []
        if ids is None or convention != EAGLE_CONFIG:
            wanted, source = engine_default_hf(L), "SGLang default [2, L//2, L-3] (no +1)"
            if ids is not None:
                where = f"GGUF {LLAMA_CPP_KEY}" if convention == LLAMA_CPP else "top-level ids"
                notes.append(
                    f"SGLang reads eagle_config.eagle_aux_hidden_state_layer_ids only: the "
                    f"{where} {ids} are not seen"
                )
        else:
            wanted = hf_indices(ids, since_25454=since)
            rule = "+1 only when the first id is 1" if since else "+1 on every explicit id"
            source = f"eagle_config ids {ids}, {rule}"
        reach = range(0, L)  # captured before layer j: the last layer's output is never reached
        if 0 in wanted:
            notes.append(
                "HF 0 (the embedding, id -1) needs a target model file that guards "
                "`residual is None` at layer 0; the plain llama.py raises there"
            )
        if L in wanted:
            notes.append(
                f"HF {L} (the last layer's output) is never reached: SGLang captures before "
                "each layer"
            )
        return finish(key, ids, wanted, source, reach, notes, None, L)

    return capture


CAPTURES = (
    CaptureRelease("sglang", _capture("sglang", True), "SGLang since #25454", 2),
    CaptureRelease(
        "sglang-pre25454", _capture("sglang-pre25454", False), "SGLang before #25454", 1
    ),
)


def launch(k: int) -> str:
    return (
        "python -m sglang.launch_server --model-path TARGET --speculative-algorithm EAGLE3 "
        f"--speculative-draft-model-path DRAFT --speculative-num-steps {k}"
    )


def shape_rule(shape: DraftShape) -> Verdict | None:
    """SGLang 0.5.23: srt/models/llama_eagle3.py (fc, the norms, the layers) and its
    load_weights 325-378, the only EAGLE-3 class for non-MLA drafts. It reads no speculators
    config: such a draft is served from a config in SGLang's layout (flat, the ids under
    eagle_config), which is what the verdict assumes for it."""
    if shape.layer == "mla":
        return None
    src = f"SGLang {RELEASE} srt/models/llama_eagle3.py (run)"
    why: list[str] = []
    if shape.speculators:
        n = shape.slots  # the config in its layout holds the draft's N ids under eagle_config
    else:
        n = shape.n_stated.get("num_aux_hidden_states", shape.n_stated.get("eagle_config", 3))
    if n != shape.slots:
        read = (
            "num_aux_hidden_states"
            if "num_aux_hidden_states" in shape.n_stated
            else "eagle_config's ids"
            if "eagle_config" in shape.n_stated
            else "no eagle_config ids"
        )
        return Verdict(
            LABEL,
            Support.REFUSES,
            (
                f"it sizes fc for {n} slots ({read}; it never reads the top-level ids) and "
                f"stops at loading fc.weight, which takes {shape.slots}",
            ),
            "write the ids under eagle_config.eagle_aux_hidden_state_layer_ids",
            src,
        )
    dropped: list[Drop] = []
    fixes = []
    if shape.layer == "qwen3":
        dropped.append(Drop.QK_NORMS)
        why.append(
            "its one EAGLE-3 class is a Llama layer, whose load_weights skips q_norm and k_norm "
            "(no such parameters)"
        )
        fixes.append("serve it on vLLM, whose Eagle3Qwen3ForCausalLM applies them")
    if shape.layers > 1 and not shape.later_hidden_norms:
        dropped.append(Drop.LATER_INPUT_NORMS)
        why.append(
            "its layers after the first normalise their input with layers.{i}.hidden_norm, "
            "which this checkpoint does not hold (it names that norm input_layernorm), so a "
            "unit weight stands in for it"
        )
        fixes.append(
            "copy layers.{i}.input_layernorm.weight to layers.{i}.hidden_norm.weight (i >= 1) "
            "in the checkpoint SGLang loads"
        )
    if shape.speculators:
        why.append("served from a config in its own layout, the ids under eagle_config")
    if dropped:
        return Verdict(
            LABEL,
            Support.DROPS,
            tuple(why),
            "; ".join(fixes),
            src,
            drops=tuple(dropped),
        )
    return Verdict(LABEL, Support.SERVES, tuple(why), source=src)


# dated facts (`Fact`): the hidden state a hyper-connection target hands the draft
# (`reconcile_hidden_state`, the doctor's hyper-connections check)
FACTS = (
    Fact(
        "issue #36829, 2026-08-28",
        "on a hyper-connection target (GLM-5.3-Flash, hc_mult=4 in its config.json) SGLang hands "
        "the draft the aux hidden state with its hc_mult residual streams flattened into one "
        "vector, which breaks the draft's fused norm (fused_eh_norm): the accept length stays at "
        "about 1.0",
        topic="hidden_state",
    ),
)

# sentences reports quote about SGLang (`Engine.SGLANG.says(key)`)
SAYS = {
    # where it reads a draft's layer ids (the serving config's notes)
    "reads_ids": "SGLang reads the ids from eagle_config only, not from a top-level key",
    # a draft that ships no lm_head (the doctor's lm_head check)
    "no_head_sized": (
        "SGLang keeps a randomly initialised head (its loader never reports a missing weight; "
        "sglang#27908: accept length 1.00)"
    ),
    "no_head_unsized": "SGLang loads the target's lm_head (no draft_vocab_size)",
    "random_head": "SGLang serves it as shipped with a random head",
}


ENGINE = ServingEngine(
    id=Engine.SGLANG,
    display="SGLang",
    aliases=("sglang", "sgl"),
    releases=(RELEASE,),
    readers=READERS,
    shape_rule=shape_rule,
    trees=True,
    overlap_round=True,
    caps_at_remaining=False,
    default_verify="sglang-target-only",
    counter_prefix=None,
    conventions=CONVENTIONS,
    launch=launch,
    captures=CAPTURES,
    windowed_log=True,
    facts=FACTS,
    tree_kv="sglang",
    says=SAYS,
    synthetic_off="SGLANG_SIMULATE_ACC_LEN unset",
    # 0.5.23: without --speculative-draft-model-quantization the draft takes --quantization
    quant_inheritance=QuantInheritance(
        since="PR #33115 (2026-08-03); 0.5.23's serving hook",
        optout="--speculative-draft-model-quantization unquant",
        projections=(
            "q_proj",
            "k_proj",
            "v_proj",
            "o_proj",
            "gate_proj",
            "up_proj",
            "down_proj",
        ),
        words="its decoder layers' attention and MLP projections (fc is a plain Linear and "
        "stays unquantized)",
    ),
    # 0.5.23's DFlash worker scales the block's embedding rows by the target model's
    # get_dflash_noise_embedding_scale() where the class has one, else 1.0; none of its model
    # classes defines it, and the draft config's input_embedding_scale is read nowhere
    embedding_scale_read=frozenset(),
    block_embedding_own=(
        1.0,
        "reads no input_embedding_scale: its DFlash worker asks the target model class "
        "(get_dflash_noise_embedding_scale, defined by none: 1.0)",
    ),
)
