"""speculators' own DFlash layout (`speculators_model_type: "dflash"`): read into the canonical
block draft, and our block forward against the logits speculators' own code wrote
(tests/golden_speculators_block, made by its make_golden.py with speculators 0.9.0)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from support import accumulation_tolerance

from inspector.errors import InputError
from inspector.formats import load_block_draft
from inspector.formats.block_config import block_draft_family, block_family
from inspector.formats.block_speculators import reader_view
from inspector.model.block import anchored_block_hidden, head_logits

ROOT = Path(__file__).parent / "golden_speculators_block"
TARGET = Path(__file__).parent / "golden_block" / "target"
CASES = ("full", "swa", "swa_noncausal")

# speculators' logits are float32 sums in its own order (flex attention over GQA groups, k and v
# of the context and the block projected apart): ours may differ by the float32 accumulation
# term of the error model (support.accumulation_tolerance, n = the hidden size, 64: 1.6e-5 on
# logits of RMS 1). Measured: at most 1.7e-6, a ninth of it.


def _case_folder(tmp: Path, case: str) -> Path:
    """A case's checkpoint: its config.json beside the one set of weights (`full`'s)."""
    if case == "full":
        return ROOT / "full"
    folder = tmp / case
    folder.mkdir()
    shutil.copy(ROOT / case / "config.json", folder / "config.json")
    shutil.copy(ROOT / "full" / "model.safetensors", folder / "model.safetensors")
    return folder


@pytest.fixture(scope="module")
def inputs() -> dict[str, torch.Tensor]:
    return load_file(str(ROOT / "inputs.safetensors"))


@pytest.fixture(scope="module")
def expected() -> dict[str, torch.Tensor]:
    return load_file(str(ROOT / "expected.safetensors"))


def _logits(draft, inputs: dict[str, torch.Tensor], anchors: torch.Tensor) -> torch.Tensor:
    """Every row's logits [A, B, V] of the blocks [x_a, mask, ...] at each anchor a."""
    block = draft.config.block
    ids = inputs["input_ids"][anchors]
    block_ids = torch.full((len(anchors), block.block_size), block.mask_token_id)
    block_ids[:, 0] = ids
    normed = anchored_block_hidden(draft, inputs["hidden_states"], anchors, block_ids)
    return head_logits(draft, normed)


@pytest.mark.parametrize("case", CASES)
def test_logits_match_speculators(tmp_path, inputs, expected, case):
    draft = load_block_draft(_case_folder(tmp_path, case), target=TARGET)
    block = draft.config.block
    assert block is not None and block.family == "dflash" and draft.layout == "dflash (speculators)"
    if case == "full":
        assert block.causal == (False, False) and draft.config.sliding_windows == ()
    else:
        # a sliding layer: causal unless sliding_window_non_causal; full layers bidirectional
        assert block.causal == (case == "swa", False)
        assert draft.config.sliding_windows == (5, None) and block.window_from_anchor
    anchors = expected[f"{case}.anchors"]
    exp = expected[f"{case}.logits"]
    got = _logits(draft, inputs, anchors)
    assert got.shape == exp.shape and got.dtype == torch.float32
    tol = accumulation_tolerance(exp, draft.config.hidden_size)
    diff = (got - exp).abs().max().item()
    assert diff <= tol, (diff, tol)


def test_window_from_the_anchor_is_what_speculators_computes(tmp_path, inputs, expected):
    """Measured from each row (the reference's window) the same weights give other logits: the
    window reads different context keys, so the golden case holds the convention."""
    draft = load_block_draft(_case_folder(tmp_path, "swa"), target=TARGET)
    block = draft.config.block
    assert block is not None
    object.__setattr__(block, "window_from_anchor", False)  # the reference's convention
    anchors = expected["swa.anchors"]
    got = _logits(draft, inputs, anchors)
    exp = expected["swa.logits"]
    tol = accumulation_tolerance(exp, draft.config.hidden_size)
    assert (got - exp).abs().max().item() > 100 * tol
    # blocks whose anchor sees no more than the window agree: only the window's reach differs
    early = anchors <= 5 - block.block_size  # n + B - 1 - window < 0: every context key
    assert (got[early] - exp[early]).abs().max().item() <= tol


def test_wiring_is_in_hf_indices():
    """aux_hidden_state_layer_ids are HF hidden_states indices: the canonical wiring as
    written, the reference's numbering one less."""
    draft = load_block_draft(ROOT / "full", target=TARGET)
    block = draft.config.block
    assert block is not None
    assert block.hf_layer_ids == (2, 5, 7) and block.layer_ids == (1, 4, 6)
    assert draft.config.aux_layer_ids == (2, 5, 7) and draft.config.aux_layer_convention == "hf"
    assert block.block_size == 4 and block.mask_token_id == 250
    assert block_draft_family(ROOT / "full") == "dflash"


def test_reader_view_is_what_the_engines_read():
    raw = json.loads((ROOT / "full" / "config.json").read_text())
    view = reader_view(raw)
    assert view["eagle_aux_hidden_state_layer_ids"] == [2, 5, 7]
    assert view["dflash_config"]["target_layer_ids"] == [1, 4, 6]
    assert view["num_hidden_layers"] == 2 and "speculators_config" in view
    plain = {"architectures": ["DFlashDraftModel"], "dflash_config": {"mask_token_id": 1}}
    assert reader_view(plain) is plain


def test_qwen3_defaults_fill_absent_keys(tmp_path):
    """transformers' to_diff_dict drops a key equal to Qwen3Config's default: an absent
    rms_norm_eps is 1e-6 and an absent head_dim 128 (here: a shape error naming it)."""
    folder = tmp_path / "ckpt"
    shutil.copytree(ROOT / "full", folder)
    cfg = json.loads((folder / "config.json").read_text())
    del cfg["transformer_layer_config"]["rms_norm_eps"]
    (folder / "config.json").write_text(json.dumps(cfg))
    assert load_block_draft(folder, target=TARGET).config.rms_norm_eps == 1e-6
    del cfg["transformer_layer_config"]["head_dim"]
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(InputError, match=r"q_proj.weight.*Qwen3Config's default 128"):
        load_block_draft(folder, target=TARGET)


def _edited(tmp: Path, edit) -> Path:
    folder = tmp / "ckpt"
    shutil.copytree(ROOT / "full", folder)
    cfg = json.loads((folder / "config.json").read_text())
    edit(cfg)
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


@pytest.mark.parametrize(
    ("edit", "field", "words"),
    [
        (lambda c: c.pop("mask_token_id"), "mask_token_id", "missing"),
        (lambda c: c.update(mask_token_id=256), "mask_token_id", r"\[0, 256\)"),
        (lambda c: c.pop("aux_hidden_state_layer_ids"), "aux_hidden_state_layer_ids", "missing"),
        (
            lambda c: c.update(aux_hidden_state_layer_ids=[2, -1]),
            "aux_hidden_state_layer_ids",
            "below 0",
        ),
        (lambda c: c.update(block_size=1), "block_size", "at least one"),
        (lambda c: c.update(draft_vocab_size=128), "draft_vocab_size", "reduced draft vocabulary"),
        (lambda c: c.pop("draft_vocab_size"), "draft_vocab_size", "32000 \\(absent"),
        (lambda c: c.pop("transformer_layer_config"), "transformer_layer_config", "missing"),
        (
            lambda c: c["transformer_layer_config"].update(layer_types=["full_attention"]),
            "transformer_layer_config.layer_types",
            "1 entries for 2 layers",
        ),
        (
            lambda c: c["transformer_layer_config"].update(
                rope_parameters={"sliding_attention": {"rope_theta": 1e4}}
            ),
            "transformer_layer_config.rope_parameters",
            "one set per layer type",
        ),
    ],
)
def test_malformed_config_is_one_line_naming_the_field(tmp_path, edit, field, words):
    folder = _edited(tmp_path, edit)
    with pytest.raises(InputError, match=words) as err:
        load_block_draft(folder, target=TARGET)
    assert err.value.field == field and "config.json" in str(err.value)
    assert "\n" not in str(err.value)


def test_sample_from_anchor_drafts_from_row_0(tmp_path, inputs, expected):
    """sample_from_anchor true: every row drafts (row k drafts x_{n+k+1}), block_size drafts a
    block; the logits are the same forward's (speculators scores every row either way), and the
    doctor holds K to block_size."""
    from inspector.doctor.checks.block_checks import block_size_finding

    folder = _edited(tmp_path, lambda c: c.update(sample_from_anchor=True))
    draft = load_block_draft(folder, target=TARGET)
    block = draft.config.block
    assert block is not None and block.anchor_drafts and block.drafts_per_block == 4
    got = _logits(draft, inputs, expected["full.anchors"])
    tol = accumulation_tolerance(expected["full.logits"], 64)
    assert (got - expected["full.logits"]).abs().max().item() <= tol
    assert block_size_finding(block, 4).severity.value == "info"
    wrong = block_size_finding(block, 3)
    assert wrong.fix == "serve with num_speculative_tokens 4" and "#41834" not in wrong.summary


def test_training_only_tensors_are_dropped_and_strays_refused(tmp_path):
    folder = tmp_path / "ckpt"
    shutil.copytree(ROOT / "full", folder)
    w = load_file(str(folder / "model.safetensors"))
    w["verifier_norm.weight"] = torch.ones(64)  # an older save's training-only tensor
    save_file(w, str(folder / "model.safetensors"))
    load_block_draft(folder, target=TARGET)
    w["markov_head.markov_w1.weight"] = torch.zeros(256, 8)
    save_file(w, str(folder / "model.safetensors"))
    with pytest.raises(InputError, match="not a tensor of this block draft's layout"):
        load_block_draft(folder, target=TARGET)


def test_other_speculators_kinds_are_not_block_drafts():
    assert block_family({"speculators_model_type": "eagle3"}) is None
    assert block_family({"speculators_model_type": "dflash"}) == "dflash"


# z-lab's keys that are not the decoder's (speculators' DFlash converter leaves them out too)
_NOT_DECODER = ("architectures", "auto_map", "block_size", "dflash_config", "num_target_layers")


def _as_speculators(src: Path, dst: Path, aux: list[int] | None = None) -> Path:
    """A z-lab DFlash folder rewritten in speculators' layout (the same tensors): the decoder's
    keys under transformer_layer_config, the ids as HF indices (`aux`: others)."""
    shutil.copytree(src, dst)
    z = json.loads((src / "config.json").read_text())
    dcfg = z["dflash_config"]
    cfg = {
        "architectures": ["DFlashDraftModel"],
        "speculators_model_type": "dflash",
        "transformer_layer_config": {k: v for k, v in z.items() if k not in _NOT_DECODER},
        "draft_vocab_size": z["vocab_size"],
        "block_size": z.get("block_size", dcfg.get("block_size")),
        "aux_hidden_state_layer_ids": aux or [i + 1 for i in dcfg["target_layer_ids"]],
        "mask_token_id": dcfg["mask_token_id"],
        "sliding_window_non_causal": False,
        "sample_from_anchor": False,
        "speculators_config": {"algorithm": "dflash"},
    }
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def _cli_json(capsys, argv: list[str]) -> tuple[int, dict]:
    from inspector.cli import main

    capsys.readouterr()
    code = main([*argv, "--json", "--device", "cpu"])
    return code, json.loads(capsys.readouterr().out)


def test_eval_is_the_z_lab_layouts_on_the_same_weights(block_bed, tmp_path, capsys):
    """eval runs a speculators folder unchanged: the same weights in both layouts give the same
    blocks, accuracy and accept length."""
    spec = _as_speculators(block_bed.draft, tmp_path / "spec")
    base = [str(block_bed.samples), "--target", str(block_bed.target), "--limit", "4"]
    code_z, zlab = _cli_json(capsys, ["eval", str(block_bed.draft), *base])
    code_s, ours = _cli_json(capsys, ["eval", str(spec), *base])
    assert code_z == code_s == 0 and ours["family"] == "dflash"
    assert ours["wirings"] == zlab["wirings"]


def test_doctor_names_speculators_key_in_its_fix(block_bed, tmp_path, capsys):
    """Configured with other layers, the doctor finds the trained ones and fixes the key the
    layout writes (aux_hidden_state_layer_ids, HF indices); vLLM's reading is the flattened
    config's (the aux ids as written)."""
    from block_fixtures import TRAINED

    spec = _as_speculators(block_bed.draft, tmp_path / "spec", aux=[2, 3, 4])
    argv = ["doctor", str(spec), str(block_bed.samples), "--target", str(block_bed.target)]
    code, report = _cli_json(capsys, argv)
    assert code == 1
    findings = {f["kind"]: f for f in report["findings"]}
    hf = [i + 1 for i in TRAINED]
    assert findings["wiring"]["fix"] == f"set aux_hidden_state_layer_ids to {hf}"
    readings = {r["reader"]: r for r in findings["engine_feeds"]["evidence"]["readings"]}
    vllm = next(r for k, r in readings.items() if k.startswith("vLLM"))
    assert vllm["fed"] == [2, 3, 4] and vllm["fix"] == f"set aux_hidden_state_layer_ids to {hf}"
