"""`capture` on a tiny random model of every target architecture EAGLE-3 drafts serve that
transformers implements: the slots equal transformers' own hidden states where they mean the same
thing, and the last slot (HF L, before the final norm) through the target's own final norm and head
gives the target's own logits. The final norm is found by what it does (inspector.capture.transformers_target),
so each architecture's module names are checked here, not assumed there. Models with no final norm
to hook, or no causal LM in transformers, are refused with one line."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from inspector.capture.run import CaptureSettings, capture
from inspector.cli import main
from inspector.errors import InputError

V = 256
L = 3
# Small enough for the whole file to take seconds; ids 0-2 are pad, bos and eos (the configs'
# defaults point past a 256-token vocabulary).
COMMON = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": L,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": V,
    "max_position_embeddings": 256,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "tie_word_embeddings": False,
}
MOE = {"num_experts_per_tok": 2, "moe_intermediate_size": 32}
# Sliding layers narrower than the prompts, so that their masks matter.
SLIDING = {
    "sliding_window": 4,
    "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
}
VISION = {  # a one-layer vision tower for the vision-language configs (never run: text only)
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "image_size": 32,
    "patch_size": 8,
}
SOFTCAP = 5.0  # Gemma's final logit soft-capping, small enough to bend these logits


def _llama():
    from transformers import LlamaConfig

    return LlamaConfig(**COMMON)


def _qwen2():
    from transformers import Qwen2Config

    return Qwen2Config(**COMMON)


def _qwen3():
    from transformers import Qwen3Config

    return Qwen3Config(**COMMON, head_dim=16)


def _qwen3_moe():
    from transformers import Qwen3MoeConfig

    # layer 0 dense, layers 1-2 sparse: both MLP kinds and the router run
    return Qwen3MoeConfig(**COMMON, **MOE, head_dim=16, num_experts=4, mlp_only_layers=[0])


def _gpt_oss():
    from transformers import GptOssConfig

    # every layer MoE with a router; attention sinks; sliding and full layers; YaRN rope
    rope = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
    return GptOssConfig(
        **{**COMMON, **SLIDING},
        head_dim=16,
        num_local_experts=4,
        num_experts_per_tok=2,
        rope_parameters={**rope, "rope_theta": 150000.0, "beta_fast": 32.0, "beta_slow": 1.0},
    )


def _deepseek_v3():
    from transformers import DeepseekV3Config

    # MLA (low-rank q and kv, split rope / no-rope heads; as many kv heads as heads, as in the
    # released configs: transformers' cached decode needs it); layer 0 dense, then MoE with a
    # grouped top-k router and a shared expert
    return DeepseekV3Config(
        **{**COMMON, "num_key_value_heads": COMMON["num_attention_heads"]},
        **MOE,
        n_routed_experts=4,
        n_shared_experts=1,
        n_group=2,
        topk_group=1,
        first_k_dense_replace=1,
        kv_lora_rank=16,
        q_lora_rank=32,
        qk_rope_head_dim=8,
        qk_nope_head_dim=8,
        v_head_dim=16,
    )


def _mistral():
    from transformers import MistralConfig

    return MistralConfig(**COMMON, sliding_window=4)


def _mistral3():
    from transformers import Mistral3Config, MistralConfig

    # Mistral Small 3.x: a vision-language model; the capture runs its language model alone
    return Mistral3Config(
        text_config=MistralConfig(**COMMON).to_dict(),
        vision_config={**VISION, "head_dim": 16},
        image_token_index=V - 1,
        spatial_merge_size=2,
    )


def _ministral3():
    from transformers import Ministral3Config

    # the text model of the Mistral 3 family (Ministral 3, Mistral Large 3's text config)
    rope = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
    rope |= {"rope_theta": 1e6, "beta_fast": 32.0, "beta_slow": 1.0, "llama_4_scaling_beta": 0.1}
    return Ministral3Config(**COMMON, head_dim=16, rope_parameters=rope)


def _gemma3_text(softcap: float | None = SOFTCAP):
    from transformers import Gemma3TextConfig

    # embeddings scaled by sqrt(hidden), (1 + w) norms, sliding layers, logit soft-capping
    return Gemma3TextConfig(**{**COMMON, **SLIDING}, head_dim=16, final_logit_softcapping=softcap)


def _gemma3():
    from transformers import Gemma3Config

    # Gemma 3 4B and up: the vision-language model, which AutoModelForCausalLM loads whole. Its
    # head applies no soft-capping (only Gemma3ForCausalLM reads final_logit_softcapping; Gemma 3
    # checkpoints set none), so its text config has none either.
    return Gemma3Config(
        text_config=_gemma3_text(softcap=None).to_dict(),
        vision_config=VISION,
        mm_tokens_per_image=4,
        image_token_index=V - 1,
        boi_token_index=V - 3,
        eoi_token_index=V - 2,
    )


def _glm4_moe():
    from transformers import Glm4MoeConfig

    # partial rotary, q/k norms, layer 0 dense, then MoE with a bias-corrected router
    return Glm4MoeConfig(
        **COMMON,
        **MOE,
        head_dim=16,
        n_routed_experts=4,
        n_shared_experts=1,
        first_k_dense_replace=1,
        n_group=1,
        topk_group=1,
        use_qk_norm=True,
    )


def _phi3():
    from transformers import Phi3Config

    # fused qkv and gate_up projections
    return Phi3Config(**COMMON)


ARCHS: dict[str, Callable] = {
    "llama": _llama,
    "qwen2": _qwen2,
    "qwen3": _qwen3,
    "qwen3_moe": _qwen3_moe,
    "gpt_oss": _gpt_oss,
    "deepseek_v3": _deepseek_v3,
    "mistral": _mistral,
    "mistral3": _mistral3,
    "ministral3": _ministral3,
    "gemma3_text": _gemma3_text,
    "gemma3": _gemma3,
    "glm4_moe": _glm4_moe,
    "phi3": _phi3,
}
PROMPTS = [list(range(3, 15)), [200, 17, 45, 3, 99, 128, 7, 250, 64]]


def _auto(cfg):
    """The auto class that loads ``cfg`` whole, as the capture picks it: the causal LM, or for a
    vision-language model transformers maps no causal LM to (Mistral 3, Qwen-VL), the
    image-text-to-text one."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    causal = cfg.model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    return AutoModelForCausalLM if causal else AutoModelForImageTextToText


def _save_random(name: str, folder: Path) -> Path:
    return save_random(ARCHS[name](), folder)


def save_random(cfg, folder: Path) -> Path:
    """A random float32 model of config ``cfg`` saved to ``folder``. Every weight is redrawn at std
    0.2: transformers' init (std 0.02, norms at 1) leaves states so small and norms so plain that a
    slot taken after the norm instead of before it, or a missing soft-cap, could pass unnoticed."""
    torch.manual_seed(0)
    model = _auto(cfg).from_config(cfg, dtype=torch.float32)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.2)
    model.save_pretrained(folder)
    return folder


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("name", list(ARCHS))
def test_capture_reproduces_the_targets_states_and_logits(tmp_path: Path, name: str) -> None:
    from transformers import AutoConfig

    from inspector.capture.transformers_target import TargetModel

    target = _save_random(name, tmp_path / name)
    inp = _jsonl(tmp_path / "ids.jsonl", [{"input_ids": ids} for ids in PROMPTS])
    out = tmp_path / "out"
    every = ",".join(str(k) for k in range(L))
    s = CaptureSettings(
        layers=f"{every},post-norm", dtype="float32", save_dtype="float32", device="cpu"
    )
    res = capture(target, inp, out, s)
    assert res.plan.slots == (*range(L), "post-norm", L)

    ref_cfg = AutoConfig.from_pretrained(str(target))
    ref = _auto(ref_cfg).from_pretrained(str(target), dtype=torch.float32).eval()
    decoder, head = ref.get_decoder(), ref.get_output_embeddings()
    softcap = getattr(ref_cfg.get_text_config(), "final_logit_softcapping", None)
    assert (softcap is not None) == (name == "gemma3_text")
    for i, ids in enumerate(PROMPTS):
        got = torch.load(out / f"data_{i}.pt", weights_only=True)
        assert got["input_ids"].tolist() == ids
        slots = got["hidden_states"]
        with torch.no_grad():
            want = ref(input_ids=torch.tensor([ids]), output_hidden_states=True)
        hs = [h[0] for h in want.hidden_states]
        assert len(hs) == L + 1
        # (a) HF 0..L-1 are transformers' own; its index L is the post-norm state.
        for k in range(L):
            torch.testing.assert_close(slots[k], hs[k], rtol=0, atol=1e-6, msg=f"{name} HF {k}")
        torch.testing.assert_close(slots[L], hs[L], rtol=0, atol=1e-6, msg=f"{name} post-norm")
        # (b) The last slot is the state before the final norm: the target's own norm and head
        # (and soft-cap) on it give the target's logits.
        pre = slots[L + 1]
        assert float((pre - hs[L]).abs().max()) > 1e-2, name  # not the post-norm state again
        with torch.no_grad():
            logits = head(decoder.norm(pre[None]))[0]
        if softcap is not None:
            logits = torch.tanh(logits / softcap) * softcap
        torch.testing.assert_close(logits, want.logits[0], rtol=0, atol=1e-4, msg=name)
    # Every listed architecture calls its final norm `norm`; found here without the name.
    model = TargetModel(target, dtype="float32", device="cpu")
    assert model.norm_name == "norm"
    # The cached forward (--generate, the live loop): a prefill, then two tokens on its cache,
    # gives the slots of one whole forward (float32 sums in another order: close, not equal).
    ids, picks = PROMPTS[0], (0, "post-norm", L)
    whole = model.slots(ids, picks, torch.float32)
    _, first, cache = model.forward_cached(torch.tensor(ids[:-2]), picks)
    _, then, _ = model.forward_cached(torch.tensor(ids[-2:]), picks, cache=cache)
    for a, b, w in zip(first, then, whole, strict=True):
        torch.testing.assert_close(torch.cat([a, b]), w, rtol=1e-5, atol=1e-4, msg=name)
    new = model.continue_prompt(ids, 3, temperature=0.0, seed=0)
    # Greedy on the cache = greedy by whole forwards, token by token, up to 3 or an EOS.
    want: list[int] = []
    while len(want) < 3 and (not want or want[-1] not in model.info.eos_ids):
        want.append(int(model.logits_forward(ids + want).float().argmax()))
    assert new == want, name


# --- refusals: one line, exit 2, nothing written ---------------------------------------------


def _refused(capsys, target: Path, tmp_path: Path) -> str:
    inp = _jsonl(tmp_path / "i.jsonl", [{"input_ids": PROMPTS[0]}])
    out = tmp_path / "o"
    code = main(["capture", str(target), str(inp), "--out", str(out), "--device", "cpu"])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("eagle-inspect: error")]
    assert code == 2 and len(errors) == 1, err
    assert not out.exists()
    return errors[0]


def test_a_model_without_a_final_norm_is_refused(tmp_path: Path, capsys) -> None:
    """OPT-350m's layout (post-layer norms, do_layer_norm_before=False) has no final norm: the
    last layer's output goes straight to the head, and no module holds the engines' last slot."""
    from transformers import AutoModelForCausalLM, OPTConfig

    cfg = OPTConfig(
        hidden_size=64,
        ffn_dim=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        vocab_size=V,
        max_position_embeddings=256,
        word_embed_proj_dim=64,
        do_layer_norm_before=False,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    AutoModelForCausalLM.from_config(cfg).save_pretrained(tmp_path / "opt")
    line = _refused(capsys, tmp_path / "opt", tmp_path)
    assert "config.json: model_type: 'opt' (OPTDecoder): no final norm module" in line


def test_a_model_with_no_causal_lm_in_transformers_is_refused(tmp_path: Path, capsys) -> None:
    from transformers import T5Config

    cfg = T5Config(vocab_size=V, d_model=64, d_ff=128, num_layers=2, num_heads=4, d_kv=16)
    cfg.save_pretrained(tmp_path / "t5")  # refused from its config: no weights needed
    line = _refused(capsys, tmp_path / "t5", tmp_path)
    assert "config.json: model_type: 't5': transformers has no causal language model" in line


def _llama_decoder():
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(_llama()).eval().get_decoder()


def test_norms_that_do_not_give_the_decoders_output_are_refused(tmp_path: Path) -> None:
    from inspector.capture.transformers_target import locate_final_norm

    assert locate_final_norm(_llama_decoder(), L, "cpu", tmp_path)[0] == "norm"
    # No norm-like module at all.
    dec = _llama_decoder()
    dec.norm = torch.nn.Identity()
    with pytest.raises(InputError, match="no final norm module") as e:
        locate_final_norm(dec, L, "cpu", tmp_path)
    assert e.value.field == "model_type" and "\n" not in str(e.value)
    # A norm whose output is not what the decoder returns (something runs after it).
    dec = _llama_decoder()
    dec.register_forward_hook(lambda m, a, o: type(o)(last_hidden_state=o.last_hidden_state * 2))
    with pytest.raises(InputError, match="no norm module's output is the state its head reads"):
        locate_final_norm(dec, L, "cpu", tmp_path)
    # A final norm whose input is not the last layer's output (something runs before it).
    dec = _llama_decoder()
    dec.norm.register_forward_pre_hook(lambda m, a: (a[0] + 1,))
    with pytest.raises(InputError, match="not its last decoder layer's output"):
        locate_final_norm(dec, L, "cpu", tmp_path)
    # The decoder layers are where the config says.
    with pytest.raises(InputError, match="no single list of its 5 decoder layers"):
        locate_final_norm(_llama_decoder(), 5, "cpu", tmp_path)
