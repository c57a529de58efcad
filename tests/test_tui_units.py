"""Pieces of the app that need no running app: tokenizer decoding, export, formatting."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from support import python_output
from test_tui_support import write_tokenizer

from inspector.errors import InputError
from inspector.export import check_out_dir, export_filename, write_json_atomic
from inspector.formats.tokenizer import TokenDecoder, find_tokenizer, make_visible

ROOT = Path(__file__).resolve().parent.parent


# --- tokenizer ----------------------------------------------------------------------------------
def test_make_visible():
    assert make_visible(" foo\tbar\n") == "·foo→bar⏎"
    assert make_visible("") == "∅"
    assert make_visible("\x00a\r") == "\\x00a␍"


def test_find_tokenizer(tmp_path):
    ckpt, target = tmp_path / "ckpt", tmp_path / "target"
    ckpt.mkdir()
    target.mkdir()
    assert find_tokenizer(None, ckpt, target) is None
    write_tokenizer(target / "tokenizer.json", 16)
    assert find_tokenizer(None, ckpt, target) == target / "tokenizer.json"
    write_tokenizer(ckpt / "tokenizer.json", 16)
    assert (
        find_tokenizer(None, ckpt, target) == ckpt / "tokenizer.json"
    )  # beside the checkpoint first
    assert find_tokenizer(target, ckpt, None) == target / "tokenizer.json"  # a folder is fine
    with pytest.raises(InputError, match="no tokenizer.json"):
        find_tokenizer(tmp_path / "nope.json")


def test_decoder_word_level(tmp_path):
    d = TokenDecoder.load(write_tokenizer(tmp_path / "tok.json", 32))
    assert d.has_text
    assert d.visible(1) == "·" and d.visible(2) == "⏎" and d.visible(3) == "→"
    assert d.visible(4) == "·the" and d.visible(10) == "w10"
    assert d.ends_line(2) and not d.ends_line(4)
    assert d.visible(999) == "999"  # outside the vocab: the id


def test_decoder_byte_level_bpe(tmp_path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<eos>"],
    )
    tok.train_from_iterator(["def foo():\n    return 'é'\n"] * 50, trainer)
    path = tmp_path / "bpe.json"
    tok.save(str(path))
    d = TokenDecoder.load(path)
    ids = tok.encode("def foo():\n    return 'é'\n").ids
    text = "".join(d.raw(i) or "" for i in ids)
    assert text == "def foo():\n    return 'é'\n"
    shown = "".join(d.visible(i) for i in ids)
    assert "⏎" in shown and "·" in shown and " " not in shown
    assert d.visible(tok.token_to_id("<eos>")) == "<eos>"
    # a lone byte of a multi-byte character shows as an escape, not as U+FFFD
    lone = tok.token_to_id("Ã")
    assert d.visible(lone) == "\\xc3"


def test_decoder_without_tokenizer():
    d = TokenDecoder()
    assert not d.has_text and d.visible(42) == "42" and d.raw(42) is None


def test_bad_tokenizer_file(tmp_path):
    p = tmp_path / "tokenizer.json"
    p.write_text("{}")
    with pytest.raises(InputError, match="tokenizer"):
        TokenDecoder.load(p)


# --- export -------------------------------------------------------------------------------------
def test_export_refuses_input_folders(tmp_path):
    samples = tmp_path / "samples"
    (samples / "sub").mkdir(parents=True)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    inputs = [str(ckpt), str(samples / "*.pt")]
    for bad in (ckpt, samples, samples / "sub"):
        with pytest.raises(InputError, match="refusing to export"):
            check_out_dir(bad, inputs)
    assert check_out_dir(tmp_path, inputs) == tmp_path.resolve()
    # a single sample file as input: its folder is an input folder
    with pytest.raises(InputError):
        check_out_dir(samples, [str(samples / "data_0.pt")])


def test_export_is_atomic_and_strict_json(tmp_path, monkeypatch):
    path = tmp_path / export_filename(3, "/x/data 3.pt")
    assert path.name == "eagle-inspect-sample0003-data_3.json"
    write_json_atomic(path, {"a": 1})
    # a failing write leaves the old file and no temporary behind
    with pytest.raises(ValueError):
        write_json_atomic(path, {"a": math.nan})
    assert json.loads(path.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_export_document_from_engine(tmp_path, monkeypatch):
    from inspector.export import export_sample
    from inspector.synthetic import SyntheticSpec, write_synthetic

    draft, samples = write_synthetic(tmp_path / "in", SyntheticSpec(n_samples=1, seq_len=20))
    from inspector.session import Inputs, load_evaluator

    ev = load_evaluator(Inputs(draft, [str(samples)], None, None, None, False))
    preds = [
        ("train", ev.predict(0, ev.wiring("train"))),
        ("serve", ev.predict(0, ev.wiring("serve"))),
    ]
    out = tmp_path / "out"
    out.mkdir()
    path = export_sample(
        preds,
        sample_index=0,
        sample_path=str(ev.samples.files[0]),
        input_paths=[str(draft), str(samples)],
        out_dir=out,
        checkpoint=str(draft),
        layout="speculators",
        slot_labels=[s.label for s in ev.slot_info],
        ttt_steps=1,
        device="cpu",
        dtype="float32",
        input_ids=ev.samples[0].input_ids.tolist(),
        decode=None,
    )
    doc = json.loads(path.read_text())
    assert [w["label"] for w in doc["wirings"]] == ["train", "serve"]
    w0 = doc["wirings"][0]
    assert len(w0["positions"]) == 18 and w0["steps"][0]["all_tok"]["total"] > 0
    assert w0["positions"][5] == json.loads(json.dumps(preds[0][1].steps[0].position_dict(5, 0)))
    assert doc["sample"]["input_ids"] == ev.samples[0].input_ids.tolist()


# --- formatting ----------------------------------------------------------------------------------
def test_number_formats():
    from inspector.formatting import fmt_float, fmt_norm

    assert fmt_float(float("nan")) == "NaN" and fmt_float(float("inf")) == "Inf"
    assert fmt_float(float("-inf")) == "-Inf"
    assert [fmt_norm(x) for x in (0.98765, 17.234, 157.04, 1234.5, 2.5e6)] == [
        "0.988",
        "17.23",
        "157.0",
        "1234",
        "2.5e6",
    ]
    assert fmt_norm(float("nan")) == "NaN"


def test_one_percent_formatter_and_escaped_text():
    from inspector.formatting import pct, printable
    from inspector.metrics import Counts

    assert pct(0.3125) == "31.2%" and pct(None) == "-"
    assert pct(-0.0123, suffix="", signed=True) == "-1.2" and pct(0.5, suffix="") == "50.0"
    assert Counts(386, 1235).fmt() == f"386/1235 {pct(386 / 1235)}"
    assert printable("run[/bold].pt") == "run[/bold].pt"  # markup is the renderer's business
    assert printable("a\x1b[31mb\nc\td\x07é\u200b") == "a\\x1b[31mb\\nc\\td\\x07é\\u200b"


def test_importing_the_app_imports_neither_torch_nor_numpy():
    code = (
        "import sys, inspector.commands.open, inspector.tui.app, inspector.tui.device_thread;"
        "print('torch' in sys.modules, 'numpy' in sys.modules)"
    )
    out = python_output(code)
    assert out.stdout.split() == ["False", "False"], out.stderr
