"""The target's head as the inspector reads it (final norm + lm_head from the safetensors, without
loading the model: inspector.formats.target_tensors) gives the target's own logits from the state before
its final norm, on a tiny random model of every architecture EAGLE-3 drafts serve (the configs of
test_capture_archs) and a few more whose heads differ (Gemma 2's default soft-cap, Granite's
logits_scaling, the Qwen vision-language layouts, a tied head). Conventions it does not know are
refused with one line."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from test_capture_archs import ARCHS, COMMON, _auto, save_random

from inspector.errors import InputError
from inspector.formats import read_target_head
from inspector.formats import target_tensors as target_mod
from inspector.formats.target_tensors import RMS, RMS_FLOAT, RMS_ONE_PLUS, read_target_lm_head

V, H = COMMON["vocab_size"], COMMON["hidden_size"]
IDS = [200, 17, 45, 3, 99, 128, 7, 250, 64, 5]


def _qwen2_5_vl():
    from transformers import Qwen2_5_VLConfig

    text = {**COMMON, "rope_parameters": {"rope_type": "default", "mrope_section": [2, 3, 3]}}
    vision = {"depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2}
    vision |= {"out_hidden_size": H, "fullatt_block_indexes": [0]}
    return Qwen2_5_VLConfig(text_config=text, vision_config=vision, image_token_id=V - 1)


def _qwen3_vl():
    from transformers import Qwen3VLConfig

    rope = {"rope_type": "default", "mrope_section": [2, 3, 3], "mrope_interleaved": True}
    text = {**COMMON, "head_dim": 16, "rope_parameters": rope}
    vision = {"depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2}
    vision |= {"out_hidden_size": H, "deepstack_visual_indexes": [0]}
    return Qwen3VLConfig(text_config=text, vision_config=vision, image_token_id=V - 1)


def _gemma2():
    from transformers import Gemma2Config

    # (1 + w) norm and the default final_logit_softcapping (30: written out, then removed below)
    return Gemma2Config(**COMMON, head_dim=16, sliding_window=4)


def _granite():
    from transformers import GraniteConfig

    # logits divided by logits_scaling
    return GraniteConfig(**COMMON, logits_scaling=4.0)


def _qwen3_tied():
    from transformers import Qwen3Config

    # no lm_head stored: the head is the embedding
    return Qwen3Config(**{**COMMON, "tie_word_embeddings": True}, head_dim=16)


CASES = {
    **ARCHS,
    "qwen2_5_vl": _qwen2_5_vl,
    "qwen3_vl": _qwen3_vl,
    "gemma2": _gemma2,
    "granite": _granite,
    "qwen3_tied": _qwen3_tied,
}
# (norm style, soft-cap, logits_scaling, tied) each case's head is read with; the rest are Llama's.
EXPECTED = {
    "gpt_oss": (RMS_FLOAT, None, None, False),
    "gemma3_text": (RMS_ONE_PLUS, 5.0, None, False),
    # the vision-language model ties its head (top-level tie_word_embeddings, default true) and
    # soft-caps nothing
    "gemma3": (RMS_ONE_PLUS, None, None, True),
    "mistral3": (RMS, None, None, True),
    "gemma2": (RMS_ONE_PLUS, 30.0, None, False),
    "granite": (RMS, None, 4.0, False),
    "qwen3_tied": (RMS, None, None, True),
}


def _own_logits(folder: Path) -> tuple[torch.Tensor, torch.Tensor, torch.nn.Module]:
    """The target's own forward: the input of its final norm [T, H] (hooked, as the capture does),
    its logits [T, V], and the norm module."""
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(str(folder))
    model = _auto(cfg).from_pretrained(str(folder), dtype=torch.float32).eval()
    norm = model.get_decoder().norm
    seen = {}
    hook = norm.register_forward_hook(lambda m, args, out: seen.update(pre=args[0]))
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([IDS])).logits[0]
    hook.remove()
    return seen["pre"][0], logits, norm


@pytest.mark.parametrize("name", list(CASES))
def test_target_head_gives_the_targets_own_logits(
    tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = save_random(CASES[name](), tmp_path / name)
    if name == "gemma2":  # a config.json without the key means the config class's default
        cfg = json.loads((folder / "config.json").read_text())
        assert cfg.pop("final_logit_softcapping") == 30.0
        (folder / "config.json").write_text(json.dumps(cfg))
    pre, want, norm = _own_logits(folder)

    # Only the head's tensors are read (the safetensors header gives the rest).
    read = []
    real = target_mod.read_tensors
    monkeypatch.setattr(
        target_mod, "read_tensors", lambda f, names: read.extend(names) or real(f, names)
    )
    head = read_target_head(folder, vocab_size=V, hidden_size=H)
    assert len(read) == 2 and read[0].endswith(("lm_head.weight", "embed_tokens.weight"))
    assert (
        read[1].endswith("norm.weight") and "vision" not in read[1] and "projector" not in read[1]
    )

    style, softcap, scaling, tied = EXPECTED.get(name, (RMS, None, None, False))
    assert (head.norm_style, head.softcap, head.logits_scaling) == (style, softcap, scaling)
    assert read[0].endswith("embed_tokens.weight") == tied
    got = head.logits(head.normed(pre))
    torch.testing.assert_close(got, want, rtol=0, atol=1e-4, msg=name)
    assert float((head.logits(pre) - want).abs().max()) > 1e-2  # the norm matters here

    # In bfloat16 the norm casts where the target's does: the same bits.
    pre16, norm16 = pre.bfloat16(), copy.deepcopy(norm).bfloat16()
    with torch.no_grad():
        assert torch.equal(head.to("cpu", torch.bfloat16).normed(pre16), norm16(pre16)), name
    # A draft that ships no head borrows the same matrix.
    assert torch.equal(read_target_lm_head(folder), head.lm_head)


# --- the config alone: conventions, refusals -----------------------------------------------------


def _target(tmp_path: Path, config: dict, tensors: dict | None = None) -> Path:
    tensors = tensors or {"lm_head.weight": torch.ones(8, 4), "model.norm.weight": torch.ones(4)}
    save_file(tensors, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


def _error(tmp_path: Path, config: dict, tensors: dict | None = None) -> str:
    folder = _target(tmp_path, config, tensors)
    with pytest.raises(InputError) as e:
        read_target_head(folder)
    assert "\n" not in str(e.value)
    return str(e.value)


def test_unknown_conventions_are_refused(tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    # Cohere: a LayerNorm and logit_scale; nothing here reads it as Llama's.
    assert _error(tmp_path, {"model_type": "cohere"}).startswith(
        f"{cfg}: model_type: 'cohere': no known final norm and head convention for it (known: "
    )
    # A vision-language model whose language model is of an unknown type.
    line = _error(tmp_path, {"model_type": "mistral3", "text_config": {"model_type": "x_lm"}})
    assert line.startswith(f"{cfg}: text_config.model_type: 'x_lm': no known final norm")
    # A vision-language wrapper the table does not know (its head could do anything).
    assert "model_type: 'llava': no known" in _error(tmp_path, {"model_type": "llava"})
    assert "expected a string" in _error(tmp_path, {"model_type": 3})
    # The lm_head alone (what a headless draft borrows) does not depend on the norm.
    assert read_target_lm_head(_target(tmp_path, {"model_type": "cohere"})).shape == (8, 4)


def test_a_remote_code_type_is_read_by_its_architecture(tmp_path: Path) -> None:
    # Kimi K2: model_type kimi_k2 (remote code), DeepseekV3ForCausalLM's layout and head.
    folder = _target(
        tmp_path, {"model_type": "kimi_k2", "architectures": ["DeepseekV3ForCausalLM"]}
    )
    head = read_target_head(folder)
    assert (head.model_type, head.norm_style, head.rms_norm_eps) == ("deepseek_v3", RMS, 1e-6)
    # a nested config naming only its language model's type is read by that type
    folder = _target(tmp_path, {"text_config": {"model_type": "gemma3_text"}})
    assert (read_target_head(folder).norm_style, read_target_head(folder).softcap) == (
        RMS_ONE_PLUS,
        None,
    )
    folder = _target(tmp_path, {"model_type": "x", "architectures": ["Gemma3ForCausalLM"]})
    assert read_target_head(folder).norm_style == RMS_ONE_PLUS


def test_defaults_and_nesting_follow_transformers(tmp_path: Path) -> None:
    # eps: the config class's default when absent (gpt-oss: 1e-5, not Llama's 1e-6)
    assert read_target_head(_target(tmp_path, {"model_type": "gpt_oss"})).rms_norm_eps == 1e-5
    # Gemma 3's cap: none by default, off when null, the value when set; never on the VLM
    for cap, want in ((None, None), (7.5, 7.5)):
        cfg = {"model_type": "gemma3_text", "final_logit_softcapping": cap}
        assert read_target_head(_target(tmp_path, cfg)).softcap == want
    assert read_target_head(_target(tmp_path, {"model_type": "gemma3_text"})).softcap is None
    assert read_target_head(_target(tmp_path, {"model_type": "gemma2"})).softcap == 30.0
    nested = {"model_type": "gemma3", "text_config": {"final_logit_softcapping": 9.0}}
    head = read_target_head(_target(tmp_path, nested))
    assert (head.model_type, head.softcap, head.norm_style) == ("gemma3", None, RMS_ONE_PLUS)
    # A flat vision-language config (Qwen2.5-VL on the hub) keeps rms_norm_eps at the top; the
    # pre-5 layout nests the language model under language_model.
    flat = {"model_type": "qwen2_5_vl", "rms_norm_eps": 1e-3}
    old = {
        "language_model.lm_head.weight": torch.ones(8, 4),
        "language_model.model.norm.weight": torch.ones(4),
        "vision_tower.norm.weight": torch.ones(3),
    }
    head = read_target_head(_target(tmp_path, flat, old))
    assert (head.rms_norm_eps, head.lm_head.shape, head.norm_weight.shape) == (1e-3, (8, 4), (4,))
    nested = {"model_type": "qwen2_5_vl", "rms_norm_eps": 1e-3, "text_config": {}}
    assert read_target_head(_target(tmp_path, nested, old)).rms_norm_eps == 1e-3
    # Granite divides by logits_scaling (default 1)
    assert read_target_head(_target(tmp_path, {"model_type": "granite"})).logits_scaling == 1.0


def test_heads_and_norms_that_cannot_be_read_are_refused(tmp_path: Path) -> None:
    wf = tmp_path / "model.safetensors"
    llama = {"model_type": "llama"}
    embed = {"model.embed_tokens.weight": torch.ones(8, 4), "model.norm.weight": torch.ones(4)}
    # No stored head: the embedding when tied, by the config or its class's default (Gemma's
    # true, Llama's false); an untied target without a head is refused.
    for cfg in ({"model_type": "gemma3_text"}, {**llama, "tie_word_embeddings": True}):
        assert read_target_head(_target(tmp_path, cfg, embed)).lm_head.shape == (8, 4)
    assert read_target_lm_head(tmp_path).shape == (8, 4)
    # (the vision-language model's own config decides, before its text config)
    nested = {"model_type": "gemma3", "text_config": {"tie_word_embeddings": False}}
    assert read_target_head(_target(tmp_path, nested, embed)).lm_head.shape == (8, 4)
    untied = {"model_type": "gemma3", "tie_word_embeddings": False}
    assert _error(tmp_path, untied, embed) == (
        f"{wf}: lm_head.weight: tensor not found (tie_word_embeddings is false)"
    )
    assert _error(tmp_path, llama, embed) == (
        f"{wf}: lm_head.weight: tensor not found (tie_word_embeddings defaults to false)"
    )
    with pytest.raises(InputError, match="defaults to false"):
        read_target_lm_head(tmp_path)
    # a known type always stores its final norm
    assert _error(tmp_path, llama, {"lm_head.weight": torch.ones(8, 4)}) == (
        f"{wf}: model.norm.weight: tensor not found (the target's final norm)"
    )
    # a norm with a bias is a LayerNorm, not an RMSNorm
    headed = {"lm_head.weight": torch.ones(8, 4), "model.norm.weight": torch.ones(4)}
    biased = {**headed, "model.norm.bias": torch.ones(4)}
    assert _error(tmp_path, llama, biased) == (
        f"{wf}: model.norm.bias: the final norm has a bias: not an RMSNorm"
    )
    two = {**headed, "model.language_model.norm.weight": torch.ones(4)}
    assert _error(tmp_path, llama, two) == (
        f"{wf}: model.norm.weight: several final norms stored "
        "(model.norm.weight, model.language_model.norm.weight)"
    )


def test_the_evaluator_rebuilds_the_verifier_with_the_targets_own_head(golden, tmp_path):
    """`eval`'s verifier argmax from the stored last state goes through a Gemma target's (1 + w)
    norm, where reading the norm as Llama's picks other tokens."""
    from inspector.evaluate import Evaluator
    from inspector.formats import SampleSet, load_draft

    root = golden / "speculators-basic"
    draft, samples = load_draft(root / "checkpoint"), SampleSet(root / "samples")
    g = torch.Generator().manual_seed(3)
    lm_head, w = torch.randn(256, 64, generator=g), torch.rand(64, generator=g) * 2 - 1.5
    tensors = {"lm_head.weight": lm_head, "model.norm.weight": w}
    cfg = {"model_type": "gemma3_text", "rms_norm_eps": 1e-5, "final_logit_softcapping": 2.0}
    ev = Evaluator(draft, samples, target_head=read_target_head(_target(tmp_path, cfg, tensors)))
    full, in_vocab = ev.verifier_argmax(0)
    x = samples[0].slots[samples[0].verifier_slot].float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)
    # soft-capped as the target does: at this small cap, float32 tanh saturates and ties the
    # largest logits, so the target's argmax is the first of them, not the uncapped one
    want = torch.tanh(((x * (1 + w)) @ lm_head.T) / 2.0) * 2.0
    d2t = draft.vocab.draft_to_target
    np.testing.assert_array_equal(full, want.argmax(-1).numpy())
    np.testing.assert_array_equal(in_vocab, d2t[want[:, d2t].argmax(-1)].numpy())
    assert (full != ((x * w) @ lm_head.T).argmax(-1).numpy()).any()
