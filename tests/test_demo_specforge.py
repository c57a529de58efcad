"""`python -m inspector.demo specforge --out DIR`: the demo draft in SpecForge's layout (the
your-draft guide runs the doctor on it). The same weights under SpecForge's names and config;
only what each engine reads from the config may differ."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from inspector.demo.__main__ import main
from inspector.demo_paths import default_demo_root
from inspector.formats.checkpoint import load_draft

DEMO = default_demo_root()


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sf") / "draft"
    assert main(["specforge", "--out", str(out)]) == 0
    return out


def test_config_and_tensors_as_specforge_exports_them(written: Path) -> None:
    text = (written / "config.json").read_text()
    cfg = json.loads(text)
    assert list(cfg) == sorted(cfg)  # to_sglang's export: keys sorted
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"]
    # SGLang's reading for a Llama target: id i is HF index i + 1 (the draft reads HF 0, 2, 4)
    assert cfg["eagle_config"] == {
        "eagle_aux_hidden_state_layer_ids": [-1, 1, 3],
        "use_aux_hidden_state": True,
    }
    assert cfg["rope_theta"] == cfg["rope_parameters"]["rope_theta"] == 10000.0
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["draft_vocab_size"]) == (128, 1, 256)
    for key in ("speculators_config", "transformer_layer_config", "norm_output"):
        assert key not in cfg
    assert "eagle_aux_hidden_state_layer_ids" not in cfg  # SpecForge writes eagle_config only
    names = set(load_file(written / "model.safetensors"))
    assert "midlayer.self_attn.q_proj.weight" in names
    assert not any("embed" in n or n.startswith("layers.") for n in names)
    assert {"fc.weight", "norm.weight", "lm_head.weight", "d2t", "t2d"} <= names


def test_the_loader_reads_the_same_draft(written: Path) -> None:
    ours = load_draft(written, target=DEMO / "target")
    theirs = load_draft(DEMO / "draft")
    assert (ours.layout, theirs.layout) == ("specforge", "speculators")
    cfg = ours.config
    assert (cfg.aux_layer_ids, cfg.aux_layer_convention) == ((-1, 1, 3), "sglang")
    assert set(ours.weights) == set(theirs.weights)  # the embedding from the target
    for name, t in theirs.weights.items():
        assert torch.equal(ours.weights[name], t), name
    assert torch.equal(ours.vocab.d2t, theirs.vocab.d2t)
    assert torch.equal(ours.vocab.t2d, theirs.vocab.t2d)
    # every setting the forward reads is the original's; only the ids' spelling, the layout's
    # name and whether the config spelt norm_before_residual out (vLLM's reading) differ
    same = replace(cfg, aux_layer_ids=theirs.config.aux_layer_ids)
    same = replace(same, aux_layer_convention=theirs.config.aux_layer_convention)
    differs = {
        k
        for k in cfg.__dataclass_fields__
        if getattr(same, k) != getattr(theirs.config, k) and not k.endswith("_explicit")
    }
    assert differs == {"source_format"}, differs


def test_refuses_an_output_inside_the_demo_or_not_new(written: Path, capsys) -> None:
    assert main(["specforge", "--out", str(written)]) == 2
    assert "not empty" in capsys.readouterr().err
    assert main(["specforge", "--out", str(DEMO / "specforge")]) == 2
    assert "outside the input folder" in capsys.readouterr().err
    assert not (DEMO / "specforge").exists()
