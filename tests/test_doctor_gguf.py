"""The doctor on llama.cpp EAGLE-3 GGUFs: the gguf_layers finding (the target layers baked into the
GGUF, as llama.cpp feeds them, against the wiring the draft was trained on) and `--source` (what
llama.cpp's converter changed between an HF draft and its GGUF).

Every GGUF is written from the demo draft by `gguf_writer.write_eagle3_gguf`, which writes what
llama.cpp's converter writes (tests/test_formats_gguf.py holds it to that). The demo target is a
6-layer Llama; the demo draft was trained on [embed, L2, L4] = HF [0, 2, 4].
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from gguf_writer import DRAFT, HELD, TARGET, Q, write_eagle3_gguf
from safetensors.torch import load_file, save_file
from support import edited_copy

from inspector.cli import main

gguf = pytest.importorskip("gguf")

pytestmark = pytest.mark.usefixtures("one_thread")

IDS = "eagle3.target_layers"
CONVENTION = "(llama.cpp: id i = the input of target layer i = HF index i)"


def _finding(doc: dict, kind: str) -> dict:
    found = [f for f in doc["findings"] if f["kind"] == kind]
    assert len(found) == 1, [f["kind"] for f in doc["findings"]]
    return found[0]


def _json(capsys, *argv: object) -> tuple[int, dict]:
    rc = main(["doctor", *map(str, argv), "--json", "--device", "cpu"])
    return rc, json.loads(capsys.readouterr().out)


def _text(capsys, monkeypatch, *argv: object) -> str:
    """The doctor's text output, each panel line unwrapped (a console wider than any line)."""
    monkeypatch.setenv("COLUMNS", "2000")
    main(["doctor", *map(str, argv), "--device", "cpu"])
    return capsys.readouterr().out


# --- gguf_layers -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def baked_246(tmp_path_factory) -> Path:
    """The demo draft baked with [2, 4, 6]: what a converter writes from a serving config that
    lists them, or a fallback on an 8-layer target."""
    path = tmp_path_factory.mktemp("gguf") / "baked.gguf"
    return write_eagle3_gguf(path, keys={IDS: ("ARRAY[INT32]", [2, 4, 6])})


@pytest.fixture(scope="module")
def doctored_246(baked_246, tmp_path_factory) -> dict:
    """doctor baked.gguf HELD --target TARGET --source DRAFT --json (one run for both findings)."""
    import contextlib
    import io

    out = io.StringIO()
    argv = ["doctor", baked_246, HELD, "--target", TARGET, "--source", DRAFT, "--json"]
    with contextlib.redirect_stdout(out):
        rc = main([*map(str, argv), "--device", "cpu"])
    assert rc == 1  # the wrong ids are an error
    return json.loads(out.getvalue())


def test_wrongly_baked_ids_name_the_trained_ones_and_the_reconversion(doctored_246, baked_246):
    f = _finding(doctored_246, "gguf_layers")
    assert f["severity"] == "error"
    summary = f["summary"]
    assert summary.startswith(
        f"GGUF {IDS} [2, 4, 6] {CONVENTION}: llama.cpp feeds fc HF [2, 4, nothing] in that order; "
    )
    assert (
        "id 6 = L (the target's 6 layers) feeds nothing in llama.cpp on this llama target: its "
        "graph sets no final state, so the slot holds zeros (llama-server: what an earlier "
        "request left there), with no warning"
    ) in summary
    assert summary.endswith(
        "the draft was trained on [embed, L2, L4] = HF [0, 2, 4] (388/865 44.9%; the baked ids' "
        "states [L2, L4, L6]: 149/865 17.2%)"
    )
    assert f["fix"] == (
        'set "eagle_aux_hidden_state_layer_ids": [0, 2, 4] at the top level of the HF draft\'s '
        "config.json (the only place llama.cpp's converter reads them, since llama.cpp PR #25794; "
        "absent there, nested under eagle_config, or with an older converter, it writes "
        "[2, n//2, n-3]) and convert again: python convert_hf_to_gguf.py HF_DRAFT_DIR "
        f"--target-model-dir {TARGET} --outfile {baked_246.with_name('baked.fixed.gguf')} "
        "--outtype f32"
    )
    ev = f["evidence"]
    assert ev["ids"] == [2, 4, 6] and ev["fed_hf_indices"] == [2, 4, None]
    assert ev["num_layers"] == 6 and ev["target_model_type"] == "llama"
    assert ev["feeds_nothing"] == [6] and ev["trained_hf_indices"] == [0, 2, 4]
    assert ev["fix_ids"] == [0, 2, 4] and ev["agrees"] is False
    assert f["wiring"] == [0, 1, 2]  # slots embed, L2, L4
    # the doctor's other findings read the ids in llama.cpp's convention, in the order listed
    assert doctored_246["configured_wiring"] == [1, 2, 3]
    w = _finding(doctored_246, "wiring")
    # the wiring finding words a GGUF's ids as baked, and its fix is a reconversion
    assert w["summary"].startswith("the GGUF's baked layers select [L2, L4, L6]")
    assert "convert it again" in w["fix"] and "config.json" in w["fix"]
    draft = w["evidence"]["layer_ids"]["draft"]
    assert draft["where"] == f"GGUF {IDS}" and draft["convention"] == "llama.cpp"
    assert draft["stated"] is True and draft["hf_indices"] == [[2, 4, 6]]


def test_the_finding_shows_in_the_text_output(baked_246, capsys, monkeypatch):
    out = _text(capsys, monkeypatch, baked_246, HELD, "--target", TARGET, "--samples", "2")
    assert "ERROR   gguf_layers" in out
    assert f"GGUF {IDS} [2, 4, 6] {CONVENTION}: llama.cpp feeds fc HF [2, 4, nothing]" in out
    assert 'fix: set "eagle_aux_hidden_state_layer_ids": [0, 2, 4] at the top level' in out


def test_correctly_baked_ids_draw_no_complaint(tmp_path, capsys):
    path = write_eagle3_gguf(tmp_path / "good.gguf")  # the demo's own top-level [0, 2, 4]
    rc, doc = _json(capsys, path, HELD, "--target", TARGET)
    assert rc == 0
    f = _finding(doc, "gguf_layers")
    assert f["severity"] == "info" and f["fix"] == "" and f["wiring"] is None
    assert f["summary"] == (
        f"GGUF {IDS} [0, 2, 4] {CONVENTION}: llama.cpp feeds fc HF [0, 2, 4] in that order; the "
        "wiring the draft was trained on ([embed, L2, L4] = HF [0, 2, 4])"
    )
    assert _finding(doc, "wiring")["severity"] == "info"
    assert doc["configured_wiring"] == doc["recommended_wiring"] == [0, 1, 2]


def test_write_fixed_on_a_gguf_points_at_the_reconversion(baked_246, tmp_path, capsys):
    argv = ["doctor", str(baked_246), str(HELD), "--write-fixed", str(tmp_path / "out")]
    assert main(argv) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--write-fixed: writes a checkpoint folder from a folder draft: for a GGUF" in err
    assert not (tmp_path / "out").exists()


# --- --source: what the conversion changed -----------------------------------------------------------


def _conversion(capsys, ckpt: Path, source: Path, *extra: object) -> tuple[int, dict]:
    rc, doc = _json(capsys, ckpt, "--source", source, *extra)
    assert [f["kind"] for f in doc["findings"]] == ["gguf_conversion"]
    return rc, doc["findings"][0]


def _lines(capsys, monkeypatch, *argv) -> list[str]:
    """The finding's table rows as the text output prints them."""
    out = _text(capsys, monkeypatch, *argv)
    return [ln.strip(" │").removeprefix("- ") for ln in out.splitlines() if "│ - " in ln]


def test_an_f32_conversion_changes_nothing(tmp_path, capsys, monkeypatch):
    path = write_eagle3_gguf(tmp_path / "f32.gguf")
    rc, f = _conversion(capsys, path, DRAFT, "--target", TARGET)
    assert rc == 0 and f["severity"] == "info" and f["fix"] == ""
    assert f["summary"] == (
        f"{DRAFT} -> {path}: the conversion changed nothing but the weights' rounding"
    )
    ev = f["evidence"]
    assert ev["changed"] is False and ev["d2t_equal"] is True and ev["converter_detects"]
    assert [(w["name"], w["gguf_type"], w["max_abs_diff"]) for w in ev["weights"]] == [
        ("fc.weight", "F32", 0.0),
        ("lm_head.weight", "F32", 0.0),
    ]
    ids = ev["layer_ids"]
    assert ids["gguf"] == ids["hf_top_level"] == [0, 2, 4] and ids["gguf_ids_from"] == "top_level"
    rows = _lines(capsys, monkeypatch, path, "--source", DRAFT, "--target", TARGET)
    assert rows == [
        f"layer ids: HF config.json top-level eagle_aux_hidden_state_layer_ids [0, 2, 4] -> GGUF "
        f"{IDS} [0, 2, 4], the top-level ids as the converter writes them (since llama.cpp PR "
        "#25794)",
        "norm_before_residual false -> false",
        "norm_before_fc false -> false",
        "d2t: the same target ids",
        "weights against the source: fc.weight F32 max |d| 0, lm_head.weight (output.weight) F32 "
        "max |d| 0",
    ]
    # the reverse: the HF folder, its GGUF as --source
    rc, back = _conversion(capsys, DRAFT, path)
    assert rc == 0 and back["evidence"]["weights"] == ev["weights"]


def _q8_0_roundtrip(w: np.ndarray) -> np.ndarray:
    """ggml's Q8_0 (ggml-quants.c quantize_row_q8_0_ref) and back, row-major blocks of 32: the
    scale d = amax/127 stored as float16, each value roundf(x / d) as an int8."""
    blocks = w.astype(np.float32).reshape(-1, 32)
    d = np.abs(blocks).max(axis=1, keepdims=True) / np.float32(127)
    inv = np.where(d == 0, np.float32(0), np.float32(1) / np.where(d == 0, 1, d))
    x = blocks * inv
    q = np.sign(x) * np.floor(np.abs(x) + np.float32(0.5))  # roundf: halves away from zero
    return (q * d.astype(np.float16).astype(np.float32)).reshape(w.shape)


def test_a_q8_0_conversion_reports_its_rounding(tmp_path, capsys, monkeypatch):
    path = write_eagle3_gguf(tmp_path / "q8.gguf", Q.Q8_0)
    rc, f = _conversion(capsys, path, DRAFT)
    assert rc == 0 and f["severity"] == "info"
    src = load_file(str(DRAFT / "model.safetensors"))
    want = {}
    for name in ("fc.weight", "lm_head.weight"):
        w = src[name].numpy()
        want[name] = float(np.abs(_q8_0_roundtrip(w).astype(np.float64) - w).max())
        # Q8_0's bound: half a step of each block's scale (amax/254), plus the float16 scale's
        assert 0 < want[name] <= np.abs(w).max() / 254 * (1 + 2.0**-10) + 1e-7
    got = {w["name"]: (w["gguf_type"], w["max_abs_diff"]) for w in f["evidence"]["weights"]}
    assert got == {n: ("Q8_0", d) for n, d in want.items()}
    rows = _lines(capsys, monkeypatch, path, "--source", DRAFT)
    assert rows[-1] == (
        f"weights against the source: fc.weight Q8_0 max |d| {want['fc.weight']:.3g}, "
        f"lm_head.weight (output.weight) Q8_0 max |d| {want['lm_head.weight']:.3g}"
    )


def test_an_absent_norm_before_residual_is_a_default_the_readers_differ_on(
    tmp_path, capsys, monkeypatch
):
    def drop(cfg):
        del cfg["norm_before_residual"]

    folder = edited_copy(DRAFT, tmp_path / "draft", config=drop)
    path = write_eagle3_gguf(tmp_path / "d.gguf", draft=folder)  # the converter writes false
    rc, f = _conversion(capsys, path, folder)
    assert rc == 0 and f["severity"] == "warning"
    assert f["summary"] == f"{folder} -> {path}: the conversion changed norm_before_residual"
    flag = next(x for x in f["evidence"]["flags"] if x["flag"] == "norm_before_residual")
    assert flag == {
        "flag": "norm_before_residual",
        "hf": None,
        "hf_readers": {"vLLM": True, "speculators": False, "llama.cpp converter": False},
        "gguf": False,
        "changed": True,
    }
    rows = _lines(capsys, monkeypatch, path, "--source", folder)
    assert (
        "norm_before_residual: absent from the HF config.json (vLLM true, speculators false, "
        "llama.cpp converter false) -> GGUF false"
    ) in rows
    assert f["fix"].startswith('write "norm_before_residual" explicitly in the HF config.json')


def test_nested_ids_make_the_converter_fall_back(tmp_path, capsys, monkeypatch):
    def nest(cfg):  # SGLang's and SpecForge's place and numbering (HF index - 1)
        del cfg["eagle_aux_hidden_state_layer_ids"]
        cfg["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": [-1, 1, 3]}

    folder = edited_copy(DRAFT, tmp_path / "draft", config=nest)
    path = write_eagle3_gguf(tmp_path / "d.gguf", draft=folder)  # [2, 6//2, 6-3]
    rc, f = _conversion(capsys, path, folder, "--target", TARGET)
    assert rc == 0 and f["severity"] == "warning"
    ids = f["evidence"]["layer_ids"]
    assert ids["gguf"] == ids["converter_writes"] == ids["converter_fallback"] == [2, 3, 3]
    assert ids["hf_nested"] == [-1, 1, 3] and ids["hf_top_level"] is None
    assert ids["gguf_ids_from"] == "fallback" and ids["changed"] is True
    rows = _lines(capsys, monkeypatch, path, "--source", folder, "--target", TARGET)
    assert rows[0] == (
        "layer ids: HF config.json eagle_config.eagle_aux_hidden_state_layer_ids [-1, 1, 3] "
        f"(nested: the converter reads the top level only) -> GGUF {IDS} [2, 3, 3], the "
        "converter's fallback [2, n//2, n-3] = [2, 3, 3] (n = 6), which it writes without "
        "top-level ids; the HF draft's ids are HF [0, 2, 4], the GGUF's HF [2, 3, 3]"
    )
    assert f["fix"].startswith(
        f'set "eagle_aux_hidden_state_layer_ids" at the top level of {folder}/config.json, as HF '
        "indices: [0, 2, 4]; then convert again: python convert_hf_to_gguf.py"
    )


def test_a_draft_the_converter_would_not_detect_is_named(tmp_path, capsys):
    """No draft_vocab_size (a full-vocabulary head, no d2t): llama.cpp's converter takes it for
    a plain llama model."""
    folder = tmp_path / "draft"
    shutil.copytree(DRAFT, folder)
    w = load_file(str(folder / "model.safetensors"))
    del w["d2t"], w["t2d"]
    w["lm_head.weight"] = load_file(str(TARGET / "model.safetensors"))["lm_head.weight"]
    save_file(w, str(folder / "model.safetensors"))
    cfg = json.loads((folder / "config.json").read_text())
    del cfg["draft_vocab_size"]
    (folder / "config.json").write_text(json.dumps(cfg))
    path = write_eagle3_gguf(tmp_path / "d.gguf")
    rc, f = _conversion(capsys, path, folder)
    assert rc == 1 and f["severity"] == "error"
    assert f["summary"].startswith(
        f"llama.cpp's converter would not detect {folder} as an EAGLE-3 draft (it needs "
        "draft_vocab_size in config.json and num_hidden_layers 1; here: no draft_vocab_size), so "
        "it writes no eagle3 GGUF from it"
    )
    assert f["evidence"]["not_detected_because"] == ["no draft_vocab_size"]


def test_with_samples_each_draft_is_scored(doctored_246):
    """The conversion finding beside the doctor's: the HF draft as vLLM feeds its config's ids,
    the GGUF as llama.cpp feeds [2, 4, 6] (fc block 2 fed zeros), and the GGUF on the HF wiring."""
    f = _finding(doctored_246, "gguf_conversion")
    assert f["severity"] == "warning"
    ev = f["evidence"]
    assert ev["layer_ids"]["gguf_ids_from"] == "other" and ev["layer_ids"]["changed"]
    assert ev["samples"] == doctored_246["samples"]
    scored = {(s["draft"], tuple(s["hf_indices"])): s["all_tok"] for s in ev["step0"]}
    hf, gguf_fed, gguf_hf = (
        scored[("hf", (0, 2, 4))],
        scored[("gguf", (2, 4, None))],
        scored[("gguf", (0, 2, 4))],
    )
    assert hf == gguf_hf  # an F32 GGUF on the same wiring is the HF draft
    assert (hf["hits"], hf["total"], gguf_fed["hits"]) == (388, 865, 100)
    table = {tuple(w["wiring"]): w["all_tok"] for w in doctored_246["wirings"]}
    assert (hf["hits"], hf["total"]) == (table[(0, 1, 2)]["hits"], table[(0, 1, 2)]["total"])
    # llama.cpp feeds block 2 nothing: worse than the [L2, L4, L6] an engine capturing HF 6 feeds
    assert gguf_fed["total"] == hf["total"] and gguf_fed["hits"] < table[(1, 2, 3)]["hits"]


def test_source_needs_one_gguf_and_one_folder(tmp_path, capsys):
    path = write_eagle3_gguf(tmp_path / "d.gguf")
    assert main(["doctor", str(path), "--source", str(path)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--source: compares a llama.cpp conversion: one of CKPT and --source a .gguf file" in err
