"""Every published draft config the project collects (the `shared/configs` folder beside the
checkout; CI has it): a random-weight checkpoint of each, saved under its trainer's tensor names,
runs `eval --ttt-steps 3` and `doctor` with finite numbers, and the loader reports its layout,
vocabulary map and slot count as the config says."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from families import build, case_id, input_proj_layout
from safetensors.torch import load_file

from inspector.cli import main
from inspector.formats import load_draft
from inspector.model import RopeConfig, rope_cos_sin

SHARED_CONFIGS = Path(__file__).resolve().parents[1].parent / "shared" / "configs"
CONFIGS = sorted(SHARED_CONFIGS.glob("*.json")) if SHARED_CONFIGS.is_dir() else []
NO_CONFIGS = f"{SHARED_CONFIGS} is absent: the published draft configs are not on this machine"

needs_configs = pytest.mark.skipif(not CONFIGS, reason=NO_CONFIGS)


pytestmark = pytest.mark.usefixtures("one_thread")


def _config(stem: str) -> Path:
    path = SHARED_CONFIGS / f"{stem}.json"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    return path


def _finite(obj: object) -> bool:
    """No NaN/Inf anywhere (the JSON writer turns them into null, so null counts as one)."""
    if isinstance(obj, float):
        return math.isfinite(obj)
    if isinstance(obj, dict):
        return all(_finite(v) for k, v in obj.items() if k not in _MAY_BE_NULL)
    if isinstance(obj, list):
        return all(_finite(v) for v in obj)
    return True


# Fields that are null by design (no verifier, nothing fixed, no configured wiring, ...).
_MAY_BE_NULL = {"verifier", "fixed", "configured_wiring", "hf_index", "mean_logp"}


def _json(capsys, argv: list[str]) -> dict:
    capsys.readouterr()
    assert main(argv) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


@needs_configs
@pytest.mark.parametrize("config_file", CONFIGS or [None], ids=[case_id(p) for p in CONFIGS])
def test_published_config_runs(config_file: Path, tmp_path: Path, capsys) -> None:
    c = build(config_file, tmp_path)
    embed = ["--embed", str(c.embed)] if c.embed else []
    draft = load_draft(c.folder, embed=c.embed)
    cfg = draft.config
    # layout, slots, vocabulary map as the config and the trainer's tensors say
    assert draft.layout == "specforge"
    assert cfg.num_fc_blocks == c.slots
    assert cfg.draft_vocab_size == c.draft_vocab
    stored = load_file(str(c.folder / "model.safetensors"))
    if c.full_vocab:
        assert torch.equal(draft.vocab.draft_to_target, torch.arange(c.draft_vocab))
    else:
        assert torch.equal(draft.vocab.draft_to_target, torch.arange(c.draft_vocab) + stored["d2t"])
        assert torch.equal(draft.vocab.t2d, stored["t2d"])
    assert cfg.mla is not None if "kv_lora_rank" in c.config else cfg.mla is None
    # SpecForge pull 186's MLA layout (input_proj, attention on H) is told by its tensors
    assert (cfg.mla is not None and cfg.mla.input_proj) == input_proj_layout(config_file.stem)
    assert cfg.fc_norm == bool(c.config.get("fc_norm") or c.config.get("use_aux_norm"))
    # none of the published configs states norm_before_residual: the engines disagree on it
    assert cfg.norm_before_residual_explicit == ("norm_before_residual" in c.config)

    report = _json(
        capsys, ["eval", str(c.folder), str(c.samples), "--ttt-steps", "3", "--json", *embed]
    )
    assert report["layout"] == "specforge"
    assert report["samples"] == 2 and not report["skipped"]
    assert len(report["slots"]) == c.slots + 1  # the fc slots plus the verifier's
    for w in report["wirings"]:
        assert len(w["wiring"]) == c.slots
        assert len(w["steps"]) == 3
        assert all(s["all_tok"]["total"] > 0 for s in w["steps"])
    assert _finite(report)

    doc = _json(capsys, ["doctor", str(c.folder), str(c.samples), "--json", *embed])
    assert len(doc["best_wiring"]) == c.slots
    assert doc["wirings"] and all(w["all_tok"]["total"] > 0 for w in doc["wirings"])
    assert _finite(doc)


@needs_configs
def test_aux_norm_applied_as_specforge(tmp_path: Path) -> None:
    """Gemma-3-27B's draft (SpecForge pull 553): `use_aux_norm` RMS-normalises each aux slot
    with its own aux_norm_{low,mid,high} before fc, as its project_hidden_states does."""
    from inspector.evaluate import Evaluator
    from inspector.formats import SampleSet
    from inspector.model import rms_norm

    c = build(_config("specforge-pr553-gemma3-27b"), tmp_path)
    draft = load_draft(c.folder, embed=c.embed, dtype="float32")
    stored = load_file(str(c.folder / "model.safetensors"))
    ev = Evaluator(draft, SampleSet(c.samples))
    sample = ev.samples[0]
    eps = draft.config.rms_norm_eps
    parts = [
        rms_norm(sample.slots[b].float(), stored[f"aux_norm_{n}.weight"].float(), eps)
        for b, n in enumerate(("low", "mid", "high"))
    ]
    expected = torch.cat(parts, -1) @ stored["fc.weight"].float().T
    got = ev.fc_output(0, ev.wiring("0,1,2"))
    assert (got - expected).abs().max() < 1e-4
    plain = (
        torch.cat([sample.slots[b].float() for b in range(3)], -1) @ stored["fc.weight"].float().T
    )
    assert (got - plain).abs().max() > 1e-2  # the norms change the fc output


@needs_configs
@pytest.mark.parametrize("stem", ["specforge-qwen2.5-vl-7b", "angelslim-qwen3-vl-8b-mrope"])
def test_mrope_is_plain_rope_for_text(stem: str, tmp_path: Path) -> None:
    c = build(_config(stem), tmp_path)
    cfg = load_draft(c.folder, embed=c.embed).config
    assert cfg.rope.rope_type == "default"
    assert cfg.rope.theta == c.config["rope_theta"]
    plain = type(cfg)(**{**cfg.__dict__, "rope": RopeConfig(theta=cfg.rope.theta)})
    pos = torch.arange(40)
    for a, b in zip(rope_cos_sin(cfg, pos, "cpu"), rope_cos_sin(plain, pos, "cpu"), strict=True):
        assert torch.equal(a, b)
