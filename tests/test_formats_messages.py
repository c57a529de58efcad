"""The exact line a user reads for each refused input (file, field, message), and the smaller
behaviours around it: speculators v2 datasets, sharded and torch weight files, OUT checks.

Each assertion compares the whole `file: field: message` text, so a message that loses its file,
its field or its words fails here (the hostile corpus checks the file and the field only)."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from inspector.errors import InputError
from inspector.formats import SampleSet, load_draft
from inspector.formats import writer as writer_mod  # its os and save_file, patched
from inspector.formats.checkpoint import rope_config
from inspector.formats.config import parse_draft_config
from inspector.formats.files import file_kind
from inspector.formats.samples import load_sample
from inspector.formats.tensorfiles import (
    find_weight_file,
    read_tensors,
    shard_map,
    tensor_headers,
    tensor_names,
)
from inspector.formats.vocab import integer_ids, mask_of
from inspector.formats.writer import DraftFiles, check_out, write_draft


def _err(fn, *args, **kwargs) -> str:
    with pytest.raises(InputError) as e:
        fn(*args, **kwargs)
    assert "\n" not in str(e.value)
    return str(e.value)


# --- speculators v2: hidden states in safetensors, ids and masks in an Arrow dataset ------------
pa = pytest.importorskip("pyarrow")


def _v2(root: Path, rows: list[tuple[list[int], list]], *, arrow: dict | None = None) -> Path:
    import pyarrow.ipc as ipc

    hs = root / "hidden_states"
    hs.mkdir(parents=True)
    for i, (ids, _) in enumerate(rows):
        save_file(
            {"hidden_states": torch.randn(len(ids), 3, 4), "token_ids": torch.tensor(ids)},
            str(hs / f"hs_{i}.safetensors"),
        )
    cols = arrow or {"input_ids": [r[0] for r in rows], "loss_mask": [r[1] for r in rows]}
    table = pa.table(cols)
    with ipc.new_stream(str(root / "data-00000-of-00001.arrow"), table.schema) as w:
        w.write_table(table)
    return hs


def test_v2_rows_in_natural_order_across_arrow_files(tmp_path: Path) -> None:
    import pyarrow.ipc as ipc

    rows = [([1, 2, 3], [0, 1, 1]), ([4, 5, 6, 7], [1, 1, 0, 1])]
    hs = _v2(tmp_path, rows[:1])
    # a second Arrow file holds row 1; "...-2" sorts before "...-10" only in natural order
    (tmp_path / "data-00000-of-00001.arrow").rename(tmp_path / "data-2.arrow")
    table = pa.table({"input_ids": [rows[1][0]], "loss_mask": [rows[1][1]]})
    with ipc.new_stream(str(tmp_path / "data-10.arrow"), table.schema) as w:
        w.write_table(table)
    save_file(
        {"hidden_states": torch.randn(4, 3, 4), "token_ids": torch.tensor(rows[1][0])},
        str(hs / "hs_1.safetensors"),
    )
    ss = SampleSet(hs)
    assert ss[0].loss_mask.tolist() == [0, 1, 1] and ss[0].input_ids.tolist() == [1, 2, 3]
    assert ss[1].loss_mask.tolist() == [1, 1, 0, 1] and ss[1].format == "speculators-v2"
    assert len(ss[1].slots) == 3 and not ss[1].warnings


def test_v2_without_input_ids_column_trusts_the_hidden_state_file(tmp_path: Path) -> None:
    hs = _v2(tmp_path, [([1, 2, 3], [0, 1, 1])], arrow={"loss_mask": [[0, 1, 1]]})
    assert SampleSet(hs)[0].loss_mask.tolist() == [0, 1, 1]


def test_v2_errors(tmp_path: Path) -> None:
    hs = _v2(tmp_path / "a", [([1, 2, 3], [0, 1, 1])], arrow={"input_ids": [[1, 2, 3]]})
    arrow = tmp_path / "a" / "data-00000-of-00001.arrow"
    assert _err(SampleSet, hs) == f"{arrow}: loss_mask: column missing"
    hs = _v2(tmp_path / "b", [([1, 2, 3], [0, 1, 1])], arrow={"loss_mask": [[0, None, 1]]})
    arrow = tmp_path / "b" / "data-00000-of-00001.arrow"
    assert _err(SampleSet, hs).startswith(f"{arrow}: row 0: not a list of integers: ")
    hs = _v2(tmp_path / "c", [([1, 2, 3], [0, 2, 1])])
    f = hs / "hs_0.safetensors"
    assert _err(SampleSet(hs).__getitem__, 0) == (
        f"{f}: loss_mask: value 2 at position 1: expected 0 or 1"
    )
    hs = _v2(tmp_path / "d", [([1, 2, 3], [0, 1, 1])])
    (tmp_path / "d" / "data-00000-of-00001.arrow").write_bytes(b"not arrow")
    assert _err(SampleSet, hs).startswith(
        f"{tmp_path / 'd' / 'data-00000-of-00001.arrow'}: unreadable Arrow file: "
    )
    hs = _v2(tmp_path / "e", [([1, 2, 3], [0, 1, 1])])
    save_file(
        {"hidden_states": torch.randn(2, 3, 4), "token_ids": torch.tensor([1, 2, 3])},
        str(hs / "hs_0.safetensors"),
    )
    assert _err(SampleSet(hs).__getitem__, 0) == (
        f"{hs / 'hs_0.safetensors'}: hidden_states: shape (2, 3, 4) torch.float32, "
        "expected floating [3, n, H]"
    )
    save_file(
        {
            "hidden_states": torch.ones(3, 3, 4, dtype=torch.int32),
            "input_ids": torch.tensor([1, 2, 3]),
        },
        str(hs / "hs_0.safetensors"),
    )
    assert "expected floating [3, n, H]" in _err(SampleSet(hs).__getitem__, 0)
    save_file(
        {"hidden_states": torch.randn(3, 3, 4), "input_ids": torch.tensor([1, 2, 9])},
        str(hs / "hs_0.safetensors"),
    )
    assert _err(SampleSet(hs, vocab_size=5).__getitem__, 0) == (
        f"{hs / 'hs_0.safetensors'}: input_ids: token id 9 at position 2 is outside the vocabulary [0, 5)"
    )


def test_v2_mask_length_differs(tmp_path: Path) -> None:
    hs = _v2(tmp_path, [([1, 2, 3], [0, 1, 1, 1])], arrow={"loss_mask": [[0, 1, 1, 1]]})
    assert _err(SampleSet(hs).__getitem__, 0) == (
        f"{hs / 'hs_0.safetensors'}: token_ids: differ from the dataset row's input_ids"
    )


def test_v2_without_a_dataset_warns(tmp_path: Path) -> None:
    hs = tmp_path / "hidden_states"
    hs.mkdir()
    save_file(
        {"hidden_states": torch.randn(3, 2, 4), "token_ids": torch.tensor([1, 2, 3])},
        str(hs / "hs_0.safetensors"),
    )
    s = SampleSet(hs)[0]
    assert s.loss_mask.tolist() == [1, 1, 1]
    assert s.warnings == ["no loss mask found beside the v2 hidden states: every position counts"]


# --- samples ---------------------------------------------------------------------------------
def test_sample_messages(tmp_path: Path) -> None:
    f = tmp_path / "data_0.pt"
    torch.save(
        {
            "input_ids": torch.tensor([1, 2, 300]),
            "hidden_states": [torch.ones(3, 2)] * 2,
            "loss_mask": torch.tensor([0, 1, 3]),
        },
        f,
    )
    assert _err(load_sample, f, vocab_size=256) == (
        f"{f}: input_ids: token id 300 at position 2 is outside the vocabulary [0, 256)"
    )
    assert _err(load_sample, f) == f"{f}: loss_mask: value 3 at position 2: expected 0 or 1"
    torch.save(
        {
            "input_ids": [1, 2, 3],
            "hidden_states": [torch.ones(3, 2)] * 2,
            "loss_mask": torch.ones(3),
        },
        f,
    )
    assert _err(load_sample, f) == f"{f}: input_ids: expected a tensor, got list"
    torch.save({"hidden_states": [torch.ones(3, 2)] * 2, "loss_mask": torch.ones(3)}, f)
    assert _err(load_sample, f) == f"{f}: input_ids: missing"
    torch.save([1, 2], f)
    assert _err(load_sample, f) == f"{f}: expected a dict of tensors"
    torch.save(
        {
            "input_ids": torch.arange(3),
            "loss_mask": torch.ones(3) * 1j,
            "hidden_states": [torch.ones(3, 2)] * 2,
        },
        f,
    )
    assert _err(load_sample, f) == f"{f}: loss_mask: dtype torch.complex64, expected 0/1 values"
    assert _err(load_sample, tmp_path / "gone.pt") == f"{tmp_path / 'gone.pt'}: file not found"
    os.mkfifo(tmp_path / "fifo.pt")
    assert _err(load_sample, tmp_path / "fifo.pt") == (
        f"{tmp_path / 'fifo.pt'}: is a FIFO, not a regular file"
    )


def test_slot_labels_carry_hf_indices(tmp_path: Path) -> None:
    (tmp_path / "data_config.json").write_text(
        json.dumps({"layer_ids": [0, 3], "index_convention": "hf"})
    )
    torch.save(
        {
            "input_ids": torch.arange(3),
            "hidden_states": [torch.ones(3, 2)] * 2,
            "loss_mask": torch.ones(3),
        },
        tmp_path / "data_0.pt",
    )
    info = SampleSet(tmp_path).slot_info
    assert [(s.label, s.hf_index, s.verifier) for s in info] == [
        ("embed", 0, False),
        ("L3", 3, True),
    ]


def test_discover_messages(tmp_path: Path) -> None:
    from inspector.formats.samples import discover

    os.mkfifo(tmp_path / "x.pt")
    assert _err(discover, tmp_path / "x.pt") == f"{tmp_path / 'x.pt'}: is a FIFO, not a sample file"
    assert _err(discover, tmp_path / "nope") == f"{tmp_path / 'nope'}: no such file or folder"
    assert _err(discover, [str(tmp_path / "*.ckpt")]) == (
        f"{tmp_path / '*.ckpt'}: no sample files found (.pt, .ckpt, hs_*.safetensors)"
    )
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "model.safetensors").write_bytes(b"")
    (tmp_path / "d" / "data_10.pt").write_bytes(b"")
    (tmp_path / "d" / "data_9.pt").write_bytes(b"")
    assert [p.name for p in discover(tmp_path / "d")] == ["data_9.pt", "data_10.pt"]
    assert [p.name for p in discover(str(tmp_path / "d" / "*.pt"))] == ["data_9.pt", "data_10.pt"]


def test_iterating_a_set(tmp_path: Path) -> None:
    for i in range(2):
        torch.save(
            {
                "input_ids": torch.arange(3) + i,
                "hidden_states": [torch.ones(3, 2)] * 2,
                "loss_mask": torch.ones(3),
            },
            tmp_path / f"data_{i}.pt",
        )
    ss = SampleSet(tmp_path)
    assert [s.input_ids.tolist() for s in ss] == [[0, 1, 2], [1, 2, 3]]
    with pytest.raises(IndexError):
        ss[2]
    with pytest.raises(IndexError):
        ss[-1]
    assert ss.skipped == []


# --- vocab ----------------------------------------------------------------------------------
def test_vocab_messages() -> None:
    wf = Path("w.safetensors")
    assert _err(integer_ids, wf, "d2t", torch.tensor([True])) == (
        "w.safetensors: d2t: dtype torch.bool, expected integers"
    )
    assert _err(integer_ids, wf, "d2t", torch.tensor([0.5])) == (
        "w.safetensors: d2t: holds a non-integer value 0.5 at index 0"
    )
    assert _err(mask_of, wf, "t2d", torch.tensor([0, 3])) == (
        "w.safetensors: t2d: holds 3 at index 1: expected 0 or 1"
    )
    assert integer_ids(wf, "d2t", torch.tensor([1, 2], dtype=torch.int32)).dtype == torch.int64
    assert mask_of(wf, "t2d", torch.tensor([0.0, 1.0])).tolist() == [False, True]


# --- config ---------------------------------------------------------------------------------
def test_config_messages() -> None:
    base = {"hidden_size": 8, "num_attention_heads": 2, "intermediate_size": 8, "vocab_size": 10}
    assert _err(parse_draft_config, "c.json", {**base, "rms_norm_eps": "x"}) == (
        "c.json: rms_norm_eps: expected a positive number, got 'x'"
    )
    assert _err(parse_draft_config, "c.json", {**base, "hidden_size": None}) == (
        "c.json: hidden_size: missing: expected a positive integer"
    )
    assert _err(
        parse_draft_config, "c.json", {**base, "rope_scaling": {"rope_type": "llama3"}}
    ) == ("c.json: rope_scaling.factor: missing: expected a positive number")
    assert (
        _err(
            parse_draft_config,
            "c.json",
            {**base, "rope_scaling": {"rope_type": "yarn", "factor": 2, "beta_fast": 0}},
        )
        == "c.json: rope_scaling.beta_fast: expected a positive number, got 0"
    )
    assert _err(parse_draft_config, "c.json", {**base, "rope_scaling": {"type": "x"}}) == (
        "c.json: rope_scaling.type: unknown RoPE type 'x' (known: default, linear, dynamic, llama3, yarn)"
    )
    assert _err(parse_draft_config, "c.json", {**base, "draft_vocab_size": 11}) == (
        "c.json: draft_vocab_size: 11 exceeds vocab_size 10"
    )
    layer = {**base, "draft_vocab_size": 11}
    assert _err(
        parse_draft_config,
        "c.json",
        {"speculators_model_type": "eagle3", "transformer_layer_config": layer},
    ) == ("c.json: transformer_layer_config.draft_vocab_size: 11 exceeds vocab_size 10")
    assert _err(parse_draft_config, "c.json", {**base, "num_key_value_heads": 3}) == (
        "c.json: num_key_value_heads: 3 does not divide 2 heads"
    )
    # a scaling object without a type is a default rope (its keys kept as stored)
    cfg = parse_draft_config("c.json", {**base, "rope_scaling": {"factor": 2.0}}).config
    assert cfg.rope.rope_type == "default" and cfg.rope.scaling == {"factor": 2.0}
    assert _err(rope_config, {"rope_theta": "1"}, {}, "t/config.json") == (
        "t/config.json: rope_theta: expected a number above 1, got '1'"
    )
    assert _err(rope_config, {}, {"rope_theta": -1}, "t/config.json") == (
        "t/config.json: rope_theta: expected a number above 1, got -1"
    )
    assert _err(rope_config, {}, {"rope_theta": 1}, "t/config.json") == (
        "t/config.json: rope_theta: expected a number above 1, got 1"  # yarn divides by log 1
    )
    assert rope_config({}, {"rope_theta": 1.5}).theta == 1.5
    huge = 10**5000  # JSON ints are unbounded; no OverflowError, no 5000-digit line
    assert _err(parse_draft_config, "c.json", {**base, "hidden_size": huge}) == (
        f"c.json: hidden_size: expected a positive integer, got an integer of {huge.bit_length()} bits"
    )
    assert _err(rope_config, {}, {"rope_theta": 2**41}, "t/config.json") == (
        "t/config.json: rope_theta: expected a number above 1, got an integer of 42 bits"
    )
    assert rope_config({}, {"rope_theta": 2**40}).theta == 2.0**40


def test_dtype_option(tmp_path: Path) -> None:
    from hostile import build_world

    w = build_world(tmp_path / "w")
    assert load_draft(w.ckpt, dtype="bf16").dtype == torch.bfloat16
    assert load_draft(w.ckpt, dtype=torch.float16).dtype == torch.float16
    assert load_draft(w.ckpt, dtype="auto").dtype == torch.float32
    assert load_draft(w.ckpt / "config.json").path == str(w.ckpt)  # a file: its folder
    assert _err(load_draft, w.ckpt, dtype="int8") == (
        "--dtype: unknown dtype 'int8' (auto, float32, bfloat16, float16)"
    )
    assert (
        _err(load_draft, tmp_path / "none") == f"{tmp_path / 'none'}: checkpoint folder not found"
    )
    d = load_draft(w.ckpt)
    assert d.vocab.d2t.dtype == torch.int64 and d.stored_vocab.d2t.dtype == torch.int64
    assert d.layout == "speculators" and d.name == "draft"


# --- weight files ---------------------------------------------------------------------------
def test_weight_file_messages(tmp_path: Path) -> None:
    idx = tmp_path / "model.safetensors.index.json"
    idx.write_text(json.dumps({"weight_map": [["a", "x.safetensors"]]}))
    assert _err(shard_map, idx) == (
        f"{idx}: weight_map: missing or not an object of tensor name -> shard file"
    )
    idx.write_text(json.dumps({"weight_map": {"a": ""}}))
    assert _err(shard_map, idx) == f"{idx}: weight_map[a]: expected a shard file name"
    idx.write_text(json.dumps({"weight_map": {"a": "x\u0000.safetensors"}}))
    assert _err(shard_map, idx) == f"{idx}: weight_map[a]: expected a shard file name"
    idx.write_text(json.dumps({"weight_map": {"a": "../x.safetensors", "b": "../x.safetensors"}}))
    assert (
        _err(shard_map, idx)
        == f"{idx}: weight_map[a]: '../x.safetensors' lies outside the checkpoint folder"
    )
    idx.write_text(json.dumps({"weight_map": {"a": "/abs/x.safetensors"}}))
    assert (
        _err(shard_map, idx)
        == f"{idx}: weight_map[a]: '/abs/x.safetensors' lies outside the checkpoint folder"
    )
    save_file({"a": torch.ones(2)}, str(tmp_path / "s1.safetensors"))
    torch.save({"b": torch.zeros(3), "meta": "not a tensor", 5: torch.ones(1)}, tmp_path / "s2.bin")
    idx.write_text(
        json.dumps({"weight_map": {"a": "s1.safetensors", "b": "s2.bin", "c": "s2.bin"}})
    )
    assert tensor_names(idx) == ["a", "b", "c"]
    assert tensor_headers(idx) is None  # a torch shard has no header to read
    assert (
        _err(read_tensors, idx) == f"{tmp_path / 's2.bin'}: c: tensor named by {idx.name} not found"
    )
    got = read_tensors(idx, ["a", "b"])
    assert set(got) == {"a", "b"} and torch.equal(got["b"], torch.zeros(3))
    # a .bin file: names, tensors, a nested state_dict, non-tensors dropped
    torch.save({"state_dict": {"x": torch.ones(2), "step": 3}}, tmp_path / "w.bin")
    assert tensor_names(tmp_path / "w.bin") == ["x"]
    assert tensor_headers(tmp_path / "w.bin") is None
    assert list(read_tensors(tmp_path / "w.bin")) == ["x"]
    assert (
        _err(read_tensors, tmp_path / "w.bin", ["y"])
        == f"{tmp_path / 'w.bin'}: y: tensor not found"
    )
    torch.save([torch.ones(1)], tmp_path / "l.bin")
    assert (
        _err(read_tensors, tmp_path / "l.bin")
        == f"{tmp_path / 'l.bin'}: expected a dict of tensors"
    )
    assert _err(read_tensors, tmp_path / "s1.safetensors", ["zz"]) == (
        f"{tmp_path / 's1.safetensors'}: zz: tensor not found"
    )
    assert tensor_names(tmp_path / "s1.safetensors") == ["a"]
    assert list(tensor_headers(tmp_path / "s1.safetensors")) == ["a"]
    assert list(load_file(str(tmp_path / "s1.safetensors"))) == ["a"]


def test_find_weight_file(tmp_path: Path) -> None:
    assert _err(find_weight_file, tmp_path).startswith(
        f"{tmp_path}: no weights found (looked for model.safetensors"
    )
    save_file({"a": torch.ones(1)}, str(tmp_path / "one.safetensors"))
    assert find_weight_file(tmp_path) == tmp_path / "one.safetensors"
    save_file({"a": torch.ones(1)}, str(tmp_path / "two.safetensors"))
    assert "no weights found" in _err(find_weight_file, tmp_path)  # two candidates: ambiguous
    torch.save({"a": torch.ones(1)}, tmp_path / "pytorch_model.bin")
    assert find_weight_file(tmp_path) == tmp_path / "pytorch_model.bin"
    os.mkfifo(tmp_path / "model.safetensors")
    assert _err(find_weight_file, tmp_path) == (
        f"{tmp_path / 'model.safetensors'}: is a FIFO, not a regular file"
    )


def test_file_kinds() -> None:
    import stat

    assert file_kind(stat.S_IFDIR) == "a folder"
    assert file_kind(stat.S_IFIFO) == "a FIFO"
    assert file_kind(stat.S_IFCHR) == "a device" and file_kind(stat.S_IFBLK) == "a device"
    assert file_kind(stat.S_IFSOCK) == "a socket"
    assert file_kind(stat.S_IFLNK) == "not a regular file"


# --- writer ---------------------------------------------------------------------------------
def _plan() -> DraftFiles:
    return DraftFiles({"a": 1}, {"x": torch.ones(1)})


def test_check_out_messages(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    assert _err(check_out, ckpt / "fixed", [ckpt], "--write-fixed") == (
        f"{ckpt / 'fixed'}: --write-fixed: must be a new folder outside the input folder {ckpt}"
    )
    (tmp_path / "f").write_text("x")
    assert (
        _err(check_out, tmp_path / "f", [], "--out")
        == f"{tmp_path / 'f'}: --out: exists and is not a folder"
    )
    assert check_out(ckpt, [], None) == ckpt  # an empty folder is fine
    (ckpt / "x").write_text("x")
    assert _err(check_out, ckpt, []) == f"{ckpt}: exists and is not empty: a new folder is needed"
    assert _err(check_out, str(tmp_path / "a\0b"), [], "--out") == (
        f"{tmp_path}/a\\x00b: --out: not a usable path: embedded null byte"
    )
    # a relative glob whose first part is a pattern: its folder is the working directory
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert "outside the input folder" in _err(check_out, "fixed", ["*.pt"])
        assert check_out(tmp_path / "ckpt2", ["ckpt/*.pt"]) == tmp_path / "ckpt2"
    finally:
        os.chdir(cwd)


def test_write_draft_errors_leave_nothing(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "file").write_text("x")
    assert _err(write_draft, _plan(), tmp_path / "file" / "out", field="--write-fixed").startswith(
        f"{tmp_path / 'file' / 'out'}: --write-fixed: cannot write: "
    )

    def no_mkdir(self, *a, **k):
        raise OSError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(Path, "mkdir", no_mkdir)
    assert _err(write_draft, _plan(), tmp_path / "new" / "deeper" / "out", field="--out") == (
        f"{tmp_path / 'new' / 'deeper' / 'out'}: --out: cannot create: Permission denied"
    )
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_write_draft_rename_race(tmp_path: Path, monkeypatch) -> None:
    real = os.rename

    def someone_else_wrote_out(src, dst):
        (Path(dst) / "theirs").write_text("x")
        return real(src, dst)

    (tmp_path / "out").mkdir()
    monkeypatch.setattr(writer_mod.os, "rename", someone_else_wrote_out)
    msg = _err(write_draft, _plan(), tmp_path / "out", field="--out")
    assert msg.startswith(f"{tmp_path / 'out'}: --out: cannot write: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no partial sibling left
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["theirs"]


def test_shared_views_and_dtypes_survive_the_write(tmp_path: Path) -> None:
    base = torch.arange(6, dtype=torch.int64)
    tensors = {
        "full": base,
        "same": base,
        "t": base.view(2, 3).t(),
        "b": torch.tensor([True, False]),
        "e": torch.zeros(0),
        "e2": torch.zeros(0, 3),
    }
    write_draft(DraftFiles({}, tensors), tmp_path / "out")
    got = load_file(str(tmp_path / "out" / "model.safetensors"))
    assert set(got) == set(tensors)
    for k, t in tensors.items():
        assert got[k].dtype == t.dtype and torch.equal(got[k], t), k
    assert torch.equal(base, torch.arange(6))


def test_torch_sample_layouts(tmp_path: Path) -> None:
    f = tmp_path / "data_0.pt"
    base = {"input_ids": torch.arange(3), "loss_mask": torch.ones(3)}
    torch.save({**base, "target": torch.ones(3, 2)}, f)  # v0 needs both keys
    assert (
        _err(load_sample, f) == f"{f}: unknown sample layout (keys: input_ids, loss_mask, target)"
    )
    torch.save({**base, "hidden_state": torch.ones(3, 2)}, f)
    assert (
        _err(load_sample, f)
        == f"{f}: unknown sample layout (keys: hidden_state, input_ids, loss_mask)"
    )
    torch.save({**base, "hidden_states": torch.ones(3, 2)}, f)  # v1 keeps a list
    assert "unknown sample layout" in _err(load_sample, f)
    torch.save({**base, "hidden_states": (torch.ones(3, 2), torch.ones(3, 2))}, f)
    assert load_sample(f).format == "speculators-v1"
    # width-1 slots are slots too
    torch.save({**base, "aux_hidden_state": torch.ones(3, 3), "hidden_state": torch.ones(3, 1)}, f)
    s = load_sample(f)
    assert s.format == "specforge" and len(s.slots) == 4 and s.slot_info[-1].post_norm
    torch.save({**base, "hidden_state": torch.ones(3, 1), "target": torch.ones(3, 1)}, f)
    s = load_sample(f)
    assert s.format == "speculators-v0" and len(s.slots) == 2 and s.slot_info[-1].label == "target"
    torch.save({**base, "aux_hidden_state": torch.ones(3, 0), "hidden_state": torch.ones(3, 0)}, f)
    assert _err(load_sample, f) == f"{f}: aux_hidden_state: width 0 not a multiple of 0"
    torch.save({**base, "aux_hidden_state": torch.ones(3, 0), "hidden_state": torch.ones(3, 2)}, f)
    assert _err(load_sample, f) == f"{f}: aux_hidden_state: width 0 not a multiple of 2"
    torch.save({**base, "aux_hidden_state": torch.ones(3, 4), "hidden_state": torch.ones(2, 2)}, f)
    assert _err(load_sample, f) == f"{f}: hidden_state: shape (2, 2), expected [3, hidden]"
    torch.save({**base, "aux_hidden_state": torch.ones(3, 4), "hidden_state": torch.ones(3, 3)}, f)
    assert _err(load_sample, f) == f"{f}: aux_hidden_state: width 4 not a multiple of 3"
    torch.save({**base, "hidden_states": [torch.ones(3, 2)]}, f)
    assert _err(load_sample, f) == f"{f}: hidden_states: 1 slots; at least 2 expected"
    torch.save({**base, "hidden_states": [torch.ones(3, 2), torch.ones(2, 2)]}, f)
    assert _err(load_sample, f) == f"{f}: hidden_states[1]: shape (2, 2), expected [3, hidden]"
    torch.save({"input_ids": torch.arange(3), "hidden_states": [torch.ones(3, 2)] * 2}, f)
    assert _err(load_sample, f) == f"{f}: loss_mask: missing"


def test_sample_cache_is_a_small_lru(tmp_path: Path, monkeypatch) -> None:
    import inspector.formats.sample_set as samples_mod

    for i in range(3):
        torch.save(
            {
                "input_ids": torch.arange(3),
                "hidden_states": [torch.ones(3, 2)] * 2,
                "loss_mask": torch.ones(3),
            },
            tmp_path / f"data_{i}.pt",
        )
    loads: list[str] = []
    real = samples_mod.load_sample
    monkeypatch.setattr(
        samples_mod, "load_sample", lambda p, *a, **k: loads.append(p.name) or real(p, *a, **k)
    )
    from inspector.cache import nbytes

    one = nbytes(SampleSet(tmp_path)[0])
    loads.clear()
    ss = SampleSet(tmp_path, cache_bytes=2 * one)  # room for two samples, in bytes
    for i in (0, 1, 0, 2, 0, 1):
        ss[i]
    # 0 and 1 cached; 0 used again; 2 evicts 1 (the least recent); 0 still cached; 1 reloads
    assert loads == ["data_0.pt", "data_1.pt", "data_2.pt", "data_1.pt"]
    assert ss.cached_bytes == 2 * one
    ss.cache_bytes = one  # shrinking evicts the least recent at once
    assert ss.cached_bytes == one
    ss[1]
    assert loads[-1] == "data_1.pt" and len(loads) == 4  # the most recent one stayed


def test_discover_globs_and_folders(tmp_path: Path) -> None:
    from inspector.formats.samples import discover

    (tmp_path / "a" / "deep").mkdir(parents=True)
    for name in (
        "a/data_2.pt",
        "a/data_10.pt",
        "a/deep/data_1.ckpt",
        "a/model.safetensors",
        "a/notes.txt",
    ):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "a" / "hs_0.safetensors").write_bytes(b"")
    os.mkfifo(tmp_path / "a" / "data_3.pt")  # a FIFO in a folder is not a sample file
    assert [str(p.relative_to(tmp_path)) for p in discover(tmp_path / "a")] == [
        "a/data_2.pt",
        "a/data_10.pt",
        "a/deep/data_1.ckpt",
        "a/hs_0.safetensors",
    ]
    # a recursive glob, in natural order of the whole path; several specs keep their order
    assert [p.name for p in discover(str(tmp_path / "a" / "**" / "data_*.*"))] == [
        "data_2.pt",
        "data_3.pt",
        "data_10.pt",
        "data_1.ckpt",
    ]
    got = discover([tmp_path / "a" / "data_10.pt", str(tmp_path / "a" / "data_2.pt")])
    assert [p.name for p in got] == ["data_10.pt", "data_2.pt"]
    assert (
        _err(discover, [tmp_path / "x", tmp_path / "y"])
        == f"{tmp_path / 'x'}: no such file or folder"
    )
    (tmp_path / "empty").mkdir()
    assert _err(discover, [tmp_path / "empty", str(tmp_path / "empty" / "*.pt")]) == (
        f"{tmp_path / 'empty'}, {tmp_path / 'empty' / '*.pt'}: no sample files found (.pt, .ckpt, hs_*.safetensors)"
    )


def test_data_config_messages(tmp_path: Path) -> None:
    from inspector.formats.samples import read_data_config

    cfg = tmp_path / "data_config.json"
    f = tmp_path / "data_0.pt"
    for content, text in [
        (
            {"hidden_states": {"layer_ids": [0, True]}},
            "hidden_states.layer_ids: expected a list of integers, got [0, True]",
        ),
        ({"layer_ids": [1.0]}, "layer_ids: expected a list of integers, got [1.0]"),
        (
            {"hidden_states": {"layer_ids": [3, -1]}},
            "hidden_states.layer_ids: -1 is negative: layer ids count from 0",
        ),
        (
            {"layer_ids": [1], "index_convention": "HF"},
            "index_convention: 'HF': expected 'hf' or 'speculators'",
        ),
        (
            {"hidden_states": {"layer_ids": [1]}, "index_convention": 3},
            "index_convention: 3: expected 'hf' or 'speculators'",
        ),
    ]:
        cfg.write_text(json.dumps(content))
        assert _err(read_data_config, f) == f"{cfg}: {text}"
    # the convention may sit at the top level of a nested file
    cfg.write_text(json.dumps({"hidden_states": {"layer_ids": [1]}, "index_convention": "hf"}))
    assert read_data_config(f) == ([1], cfg)
    cfg.write_text(
        json.dumps(
            {
                "hidden_states": {"layer_ids": [1], "index_convention": "speculators"},
                "index_convention": "hf",
            }
        )
    )
    assert read_data_config(f) == ([2], cfg)  # the nested one wins


def test_slot_and_mask_messages(tmp_path: Path) -> None:
    f = tmp_path / "data_0.pt"
    base = {"input_ids": torch.arange(4), "loss_mask": torch.ones(4)}
    torch.save(
        {**base, "hidden_states": [torch.ones(4, 2), torch.ones(4, 2, dtype=torch.int32)]}, f
    )
    assert (
        _err(load_sample, f)
        == f"{f}: hidden_states[1]: dtype torch.int32, expected one of float16, bfloat16, float32, float64"
    )
    torch.save({**base, "hidden_states": [torch.ones(1, 4, 2), torch.ones(1, 4, 2)]}, f)
    assert [tuple(s.shape) for s in load_sample(f).slots] == [(4, 2), (4, 2)]  # [1, T, H] is [T, H]
    torch.save({**base, "hidden_states": [torch.ones(2, 4, 2), torch.ones(4, 2)]}, f)
    assert _err(load_sample, f) == f"{f}: hidden_states[0]: shape (2, 4, 2), expected [4, hidden]"
    torch.save({**base, "hidden_states": [torch.ones(4, 2), 7]}, f)
    assert _err(load_sample, f) == f"{f}: hidden_states[1]: expected a tensor, got int"
    torch.save(
        {
            "input_ids": torch.arange(4),
            "loss_mask": torch.ones(2, 2),
            "hidden_states": [torch.ones(4, 2)] * 2,
        },
        f,
    )
    assert _err(load_sample, f) == f"{f}: loss_mask: shape (2, 2), expected [4]"
    torch.save(
        {
            "input_ids": torch.arange(4).view(2, 2),
            "loss_mask": torch.ones(4),
            "hidden_states": [torch.ones(4, 2)] * 2,
        },
        f,
    )
    assert (
        _err(load_sample, f)
        == f"{f}: input_ids: expected integer ids [T] with T >= 3, got shape (2, 2)"
    )


def test_default_cache_is_bounded_by_bytes(tmp_path: Path) -> None:
    from inspector.formats.sample_set import DEFAULT_CACHE_BYTES

    torch.save(
        {
            "input_ids": torch.arange(3),
            "hidden_states": [torch.ones(3, 2)] * 2,
            "loss_mask": torch.ones(3),
        },
        tmp_path / "data_0.pt",
    )
    ss = SampleSet(tmp_path)
    assert ss.cache_bytes == DEFAULT_CACHE_BYTES == 2**30
    from inspector.cache import nbytes

    tensors = 3 * 8 + 2 * 3 * 2 * 4 + ss[0].loss_mask.nbytes
    assert ss.cached_bytes == nbytes(ss[0]) >= tensors  # the tensors and the path's text


def test_write_draft_messages_name_the_option(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "link.json").symlink_to(tmp_path / "elsewhere.json")
    (tmp_path / "elsewhere.json").write_text("{}")
    plan = DraftFiles({}, {"x": torch.ones(1)}, (ckpt / "link.json",))
    assert _err(write_draft, plan, tmp_path / "out") == (
        f"{ckpt / 'link.json'}: not a regular file of the checkpoint folder: not copied"
    )
    (ckpt / "config.json").write_text("{}")
    plan = DraftFiles({}, {"x": torch.ones(1)}, (ckpt / "config.json",))
    assert "not copied" in _err(write_draft, plan, tmp_path / "out")  # written from the plan
    assert _err(write_draft, _plan(), ckpt / "fixed", inputs=[ckpt], field="--write-fixed") == (
        f"{ckpt / 'fixed'}: --write-fixed: must be a new folder outside the input folder {ckpt}"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "elsewhere.json"]


def test_failed_parent_creation_removes_what_it_made(tmp_path: Path, monkeypatch) -> None:
    real = Path.mkdir
    made: list[Path] = []

    def second_fails(self, *a, **k):
        if made:
            raise OSError(errno.EROFS, "Read-only file system")
        made.append(self)
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "mkdir", second_fails)
    out = tmp_path / "a" / "b" / "out"
    assert _err(write_draft, _plan(), out, field="--out") == (
        f"{out}: --out: cannot create: Read-only file system"
    )
    monkeypatch.undo()
    assert made == [tmp_path / "a"] and list(tmp_path.iterdir()) == []


def test_vocab_map_messages() -> None:
    from inspector.formats.vocab import vocab_map

    wf = Path("w.safetensors")
    for args, text in [
        ((None, None, 4, 2), "d2t: absent but draft_vocab_size 4 > vocab_size 2"),
        ((None, torch.ones(4), 4, 4), "d2t: absent while t2d is present"),
        ((torch.tensor([0]), None, 2, 4), "d2t: has 1 entries, expected draft_vocab_size 2"),
        (
            (torch.tensor([0, 3]), None, 2, 4),
            "d2t: maps draft ids to target ids outside [0, 4) (offsets expected: target = draft + d2t)",
        ),
        (
            (torch.tensor([0, 1]), torch.tensor([1, 0, 1]), 2, 4),
            "t2d: has 3 entries, expected vocab_size 4",
        ),
        (
            (torch.tensor([0, 1]), torch.tensor([1, 1, 1, 0]), 2, 4),
            "t2d: marks 3 tokens, expected draft_vocab_size 2",
        ),
        (
            (torch.tensor([0, 1]), torch.tensor([1, 1, 0, 0]), 2, 4),
            "d2t: disagrees with t2d: nonzero(t2d) != arange(D) + d2t",
        ),
        ((torch.tensor([0.5, 1]), None, 2, 4), "d2t: holds a non-integer value 0.5 at index 0"),
        (
            (torch.tensor([0, 1]), torch.tensor([0, 2, 0, 1]), 2, 4),
            "t2d: holds 2 at index 1: expected 0 or 1",
        ),
    ]:
        assert _err(vocab_map, *args, wf) == f"w.safetensors: {text}"
    m = vocab_map(torch.tensor([0, 1]), None, 2, 4, wf)
    assert m.t2d.dtype == torch.bool and m.d2t.dtype == torch.int64
    notes: list[str] = []
    m = vocab_map(torch.tensor([1, 3]), None, 2, 4, wf, strict=False, notes=notes)  # ids, no t2d
    assert m.d2t.tolist() == [1, 2] and m.t2d.dtype == torch.bool
    assert notes == ["d2t holds absolute target ids, not offsets: read as ids"]
    m = vocab_map(torch.tensor([1, 3]), None, 2, 4, wf, strict=False)  # notes optional
    assert m.d2t.tolist() == [1, 2]


def test_lenient_vocab_edges() -> None:
    from inspector.formats.vocab import vocab_map

    wf = Path("w")
    # offsets that reach the last target id exactly are valid offsets: nothing to repair
    notes: list[str] = []
    m = vocab_map(torch.tensor([0, 2]), None, 2, 4, wf, strict=False, notes=notes)
    assert m.d2t.tolist() == [0, 2] and notes == []
    # ids including 0 and V-1 are valid ids
    m = vocab_map(
        torch.tensor([0, 3]), torch.tensor([1, 0, 0, 1]), 2, 4, wf, strict=False, notes=notes
    )
    assert m.d2t.tolist() == [0, 2] and notes == [
        "d2t holds absolute target ids, not offsets: read as ids"
    ]
    # duplicated offsets are not valid offsets; valid as ids they are read as ids
    notes.clear()
    m = vocab_map(
        torch.tensor([1, 0]), torch.tensor([1, 1, 0, 0]), 2, 4, wf, strict=False, notes=notes
    )
    assert m.d2t.tolist() == [1, -1] and notes == [
        "d2t holds absolute target ids, not offsets: read as ids"
    ]
    # a t2d of the wrong length is ignored by the repair, then refused by the strict checks
    notes.clear()
    with pytest.raises(InputError, match="t2d: has 3 entries"):
        vocab_map(
            torch.tensor([0, 1]), torch.tensor([1, 0, 1]), 2, 4, wf, strict=False, notes=notes
        )
    # neither offsets nor ids in range: no repair
    with pytest.raises(InputError, match="outside"):
        vocab_map(torch.tensor([-1, 7]), None, 2, 4, wf, strict=False, notes=notes)
    assert notes == []


def test_embedding_found_under_a_short_name(tmp_path: Path) -> None:
    from inspector.formats import read_embedding

    emb = torch.randn(4, 2)
    save_file(
        {"backbone.embed.weight": emb, "backbone.norm.weight": torch.ones(2)},
        str(tmp_path / "w.safetensors"),
    )
    assert torch.equal(read_embedding(tmp_path / "w.safetensors", (4, 2)), emb)


def test_file_reading_messages(tmp_path: Path) -> None:
    from inspector.formats.files import check_regular, read_bytes, read_json

    os.mkfifo(tmp_path / "fifo")
    assert (
        _err(check_regular, tmp_path / "fifo", "cfg")
        == f"{tmp_path / 'fifo'}: cfg: is a FIFO, not a regular file"
    )
    assert (
        _err(check_regular, tmp_path / "none", "cfg") == f"{tmp_path / 'none'}: cfg: file not found"
    )
    assert (
        _err(check_regular, tmp_path / "a\0b")
        == f"{tmp_path}/a\0b: cannot read: embedded null byte"
    )
    (tmp_path / "f").write_bytes(b"12345")
    assert (
        _err(read_bytes, tmp_path / "f", 4, "x")
        == f"{tmp_path / 'f'}: x: 5 bytes: larger than the 4 bytes allowed"
    )
    assert read_bytes(tmp_path / "f", 5) == b"12345"
    assert (
        _err(read_bytes, tmp_path / "fifo", 4, "x")
        == f"{tmp_path / 'fifo'}: x: is a FIFO, not a regular file"
    )
    (tmp_path / "d").mkdir()
    assert _err(read_json, tmp_path / "d") == f"{tmp_path / 'd'}: is a folder, not a regular file"
    (tmp_path / "j").write_text("[]")
    assert _err(read_json, tmp_path / "j") == f"{tmp_path / 'j'}: expected a JSON object"
    (tmp_path / "j").write_text("{")
    assert _err(read_json, tmp_path / "j").startswith(
        f"{tmp_path / 'j'}: not valid JSON: Expecting"
    )


def test_read_bytes_never_blocks_on_a_fifo_swapped_in(tmp_path: Path, monkeypatch) -> None:
    """The regular-file check and the open race: the open itself must not block on a FIFO."""
    import inspector.formats.files as files_mod

    os.mkfifo(tmp_path / "fifo")
    monkeypatch.setattr(files_mod, "check_regular", lambda path, field=None: 0)
    assert (
        _err(files_mod.read_bytes, tmp_path / "fifo", 10)
        == f"{tmp_path / 'fifo'}: not a regular file"
    )


def test_safetensors_header_messages(tmp_path: Path) -> None:
    from inspector.formats.headers import safetensors_header

    f = tmp_path / "w.safetensors"
    f.write_bytes(b"\x01")
    assert _err(safetensors_header, f) == f"{f}: not a safetensors file: shorter than its header"
    f.write_bytes((2**64 - 1).to_bytes(8, "little") + b"{}")
    assert _err(safetensors_header, f) == f"{f}: not a safetensors file: header length {2**64 - 1}"
    f.write_bytes((4).to_bytes(8, "little") + b"{}")
    assert _err(safetensors_header, f) == f"{f}: not a safetensors file: header length 4"
    f.write_bytes((2).to_bytes(8, "little") + b"[]")
    assert _err(safetensors_header, f) == f"{f}: not a safetensors file: header is not an object"
    f.write_bytes((2).to_bytes(8, "little") + b"{x")
    assert _err(safetensors_header, f).startswith(f"{f}: not a safetensors file: Expecting")
    header = json.dumps({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 12]}}).encode()
    f.write_bytes(len(header).to_bytes(8, "little") + header + bytes(8))
    assert (
        _err(safetensors_header, f)
        == f"{f}: a: header data_offsets [0, 12] lie outside the file's 8 data bytes"
    )
    header = json.dumps(
        {
            "a": {"dtype": "F32", "shape": [0, 3], "data_offsets": [0, 0]},
            "b": {"dtype": "F32", "shape": [2], "data_offsets": [0, True]},
        }
    ).encode()
    f.write_bytes(len(header).to_bytes(8, "little") + header + bytes(8))
    assert _err(safetensors_header, f) == f"{f}: b: header data_offsets is not [begin, end]"
    header = json.dumps(
        {
            "a": {"dtype": "F32", "shape": [0, 3], "data_offsets": [0, 0]},
            "b": {"dtype": "F32", "shape": [True], "data_offsets": [0, 4]},
        }
    ).encode()
    f.write_bytes(len(header).to_bytes(8, "little") + header + bytes(8))
    assert _err(safetensors_header, f) == f"{f}: b: header shape [True] is not a list of sizes"
    header = json.dumps(
        {
            "a": {"dtype": "F32", "shape": [0, 3], "data_offsets": [0, 0]},
            "b": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        }
    ).encode()
    f.write_bytes(len(header).to_bytes(8, "little") + header + bytes(8))
    h = safetensors_header(f)
    assert (
        h["a"].shape == (0, 3)
        and h["b"].begin == 8 + len(header)
        and h["b"].end == 16 + len(header)
    )
    header = json.dumps({"a": {"shape": [2], "data_offsets": [0, 8]}}).encode()
    f.write_bytes(len(header).to_bytes(8, "little") + header + bytes(8))
    assert _err(safetensors_header, f) == f"{f}: a: header dtype missing"
    header = json.dumps({"a": [1]}).encode()
    f.write_bytes(len(header).to_bytes(8, "little") + header + bytes(8))
    assert _err(safetensors_header, f) == f"{f}: a: header entry is not an object"


def test_more_config_edges() -> None:
    flat = {"hidden_size": 4, "num_attention_heads": 4, "intermediate_size": 8, "vocab_size": 10}
    c = parse_draft_config("c.json", flat).config
    assert c.head_dim == 1 and c.draft_vocab_size == 10 and c.target_hidden_size == 4
    # rope_parameters of a scaled type are used even with a legacy rope_scaling beside them
    r = rope_config(
        {
            "rope_parameters": {"rope_type": "linear", "factor": 2.0},
            "rope_scaling": {"type": "llama3", "factor": 8.0},
        },
        {},
        "c.json",
    )
    assert (r.rope_type, r.scaling) == ("linear", {"factor": 2.0})
    r = rope_config(
        {"rope_scaling": {"rope_type": "linear", "factor": 3.0}}, {}, "c.json"
    )  # nested only
    assert (r.rope_type, r.scaling) == ("linear", {"factor": 3.0})
    r = rope_config(
        {}, {"rope_scaling": {"rope_type": "linear", "factor": 4.0}}, "c.json"
    )  # top only
    assert (r.rope_type, r.scaling) == ("linear", {"factor": 4.0})
    assert _err(parse_draft_config, "c.json", {"speculators_model_type": "eagle2"}) == (
        "c.json: speculators_model_type: 'eagle2' is not an EAGLE-3 draft"
    )


def test_load_draft_fields_and_devices(tmp_path: Path) -> None:
    from hostile import build_world

    w = build_world(tmp_path / "w")
    d = load_draft(w.ckpt)
    assert (d.name, d.path, d.layout, d.notes) == ("draft", str(w.ckpt), "speculators", [])
    assert d.weights["fc.weight"].dtype == torch.float32 and d.vocab.t2d.dtype == torch.bool
    m = load_draft(w.ckpt, device="meta")
    assert m.device.type == "meta" and m.vocab.d2t.device.type == "meta"
    assert m.stored_vocab.d2t.device.type == "cpu"  # what was stored stays as read
    h = load_draft(w.ckpt, dtype="float16")
    assert h.dtype == torch.float16 and h.vocab.d2t.dtype == torch.int64


def test_token_id_zero_and_float16_edges(tmp_path: Path) -> None:
    from inspector.formats.samples import slot_warnings

    f = tmp_path / "data_0.pt"
    torch.save(
        {
            "input_ids": torch.tensor([0, 1, 0]),
            "hidden_states": [torch.ones(3, 2)] * 2,
            "loss_mask": torch.ones(3),
        },
        f,
    )
    assert load_sample(f, vocab_size=2).input_ids.tolist() == [0, 1, 0]
    exact = torch.full((2, 2), 65504.0)  # representable in float16: no overflow
    assert slot_warnings([exact]) == []
    assert slot_warnings([torch.zeros(0, 4)]) == []


# --- edges the second mutation run showed --------------------------------------------------
def test_read_bytes_os_errors_and_a_file_that_grew(tmp_path: Path, monkeypatch) -> None:
    import inspector.formats.files as files_mod

    f = tmp_path / "c.json"
    f.write_bytes(b"{}" * 10)

    def denied(*a, **k):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(files_mod.os, "open", denied)
    assert _err(files_mod.read_bytes, f, 100, "cfg") == f"{f}: cfg: cannot read: Permission denied"
    monkeypatch.undo()
    monkeypatch.setattr(files_mod, "check_regular", lambda path, field=None: 1)  # grew since
    assert _err(files_mod.read_bytes, f, 5, "cfg") == f"{f}: cfg: larger than the 5 bytes allowed"
    os.mkfifo(tmp_path / "fifo")
    assert (
        _err(files_mod.read_bytes, tmp_path / "fifo", 5, "cfg")
        == f"{tmp_path / 'fifo'}: cfg: not a regular file"
    )
    monkeypatch.undo()
    from inspector.formats.files import check_regular

    assert (
        _err(check_regular, tmp_path / "a\0b", "cfg")
        == f"{tmp_path}/a\0b: cfg: cannot read: embedded null byte"
    )


def test_pickles_of_every_protocol_with_memo(tmp_path: Path) -> None:
    import io
    import pickle
    import zipfile as zf

    from inspector.formats.headers import check_torch_zip

    shared = ["x"] * 3
    for protocol in (0, 1, 2):
        buf = io.BytesIO()
        pickle.dump({"a": shared, "b": shared, "c": (shared, shared)}, buf, protocol=protocol)
        f = tmp_path / f"p{protocol}.pt"
        with zf.ZipFile(f, "w") as z:
            z.writestr("archive/data.pkl", buf.getvalue())
        check_torch_zip(f)  # PUT/GET (protocol 0), BINPUT/BINGET (1, 2) followed
    # a late tied tensor: memo indices past 255 are fetched with LONG_BINGET
    state = {f"t{i}": torch.full((2,), float(i)) for i in range(300)}
    state["tied"] = state["t299"]
    torch.save(state, tmp_path / "late.pt", pickle_protocol=2)
    check_torch_zip(tmp_path / "late.pt")
    f = tmp_path / "under.pt"
    with zf.ZipFile(f, "w") as z:
        z.writestr("archive/data.pkl", b"\x80\x020.")  # POP on an empty stack
    assert _err(check_torch_zip, f) == f"{f}: data.pkl: malformed pickle: stack underflow at POP"


def test_text_persistent_ids_and_long_ids(tmp_path: Path) -> None:
    import zipfile as zf

    from inspector.formats.headers import check_torch_zip

    f = tmp_path / "p0.pt"
    with zf.ZipFile(f, "w") as z:
        z.writestr("archive/data.pkl", b"Pstorage0\n.")  # protocol 0: a text persistent id
    assert _err(check_torch_zip, f) == f"{f}: data.pkl: unexpected persistent id 'storage0'"
    long_id = "k" * 200
    with zf.ZipFile(f, "w") as z:
        z.writestr("archive/data.pkl", b"P" + long_id.encode() + b"\n.")
    msg = _err(check_torch_zip, f)
    assert (
        msg == f"{f}: data.pkl: unexpected persistent id '{'k' * 79}"
    )  # the id cut at 80 characters


def test_crc_errors_and_the_pickle_size_bound(tmp_path: Path, monkeypatch) -> None:
    import zipfile as zf

    import inspector.formats.headers as headers

    f = tmp_path / "s.pt"
    torch.save({"a": torch.zeros(2)}, f)
    with zf.ZipFile(f) as z:
        info = next(i for i in z.infolist() if i.filename.endswith("data.pkl"))
    raw = bytearray(f.read_bytes())
    start = raw.index(b"\x80\x02")  # the pickle's first bytes, inside its record
    raw[start + 5] ^= 0xFF
    g = tmp_path / "crc.pt"
    g.write_bytes(bytes(raw))
    assert _err(headers.check_torch_zip, g).startswith(
        f"{g}: not a readable zip archive: Bad CRC-32"
    )
    monkeypatch.setattr(headers, "MAX_PICKLE_BYTES", info.file_size)
    headers.check_torch_zip(f)  # exactly at the bound: fine
    monkeypatch.setattr(headers, "MAX_PICKLE_BYTES", info.file_size - 1)
    assert "larger than a tensor description can be" in _err(headers.check_torch_zip, f)


def test_rebuild_calls_are_recognised_by_name_only(tmp_path: Path) -> None:
    import io
    import pickle
    import zipfile as zf
    from collections import OrderedDict

    import torch._utils

    from inspector.formats.headers import check_torch_zip

    class Ref:
        def __init__(self, pid):
            self.pid = pid

    class Call:
        def __init__(self, fn, *args):
            self.fn, self.args = fn, args

        def __reduce__(self):
            return (self.fn, self.args)

    class P(pickle.Pickler):
        def persistent_id(self, obj):
            return obj.pid if isinstance(obj, Ref) else None

    def archive(obj, protocol=2) -> Path:
        buf = io.BytesIO()
        P(buf, protocol=protocol).dump(obj)
        f = tmp_path / "r.pt"
        with zf.ZipFile(f, "w") as z:
            z.writestr("archive/data.pkl", buf.getvalue())
            z.writestr("archive/data/0", bytes(24))
        return f

    pid = ("storage", torch.FloatStorage, "0", "cpu", 6)
    # another callable with view-like arguments is not a tensor view
    check_torch_zip(archive({"x": Call(OrderedDict, Ref(pid), 0, (99,), (1,))}))
    # the four-argument form of the rebuild call is checked
    f = archive({"x": Call(torch._utils._rebuild_tensor_v2, Ref(pid), 0, (99,), (1,))})
    assert (
        _err(check_torch_zip, f)
        == f"{f}: data/0: a tensor of shape [99] needs 99 elements; the record holds 6"
    )
    # and so are views pickled with STACK_GLOBAL (protocol 4)
    f = archive(
        {"x": Call(torch._utils._rebuild_tensor_v2, Ref(pid), 0, (7,), (1,), False, OrderedDict())},
        4,
    )
    assert (
        _err(check_torch_zip, f)
        == f"{f}: data/0: a tensor of shape [7] needs 7 elements; the record holds 6"
    )


def test_v2_and_torch_samples_missing_keys(tmp_path: Path) -> None:
    hs = tmp_path / "hidden_states"
    hs.mkdir()
    f = hs / "hs_0.safetensors"
    save_file({"token_ids": torch.tensor([1, 2, 3])}, str(f))
    assert _err(load_sample, f) == f"{f}: hidden_states: missing"
    save_file({"hidden_states": torch.ones(3, 2, 2)}, str(f))
    assert _err(load_sample, f) == f"{f}: input_ids: missing"
    save_file(
        {"hidden_states": torch.ones(3, 2, 2), "token_ids": torch.tensor([1.0, 2, 3])}, str(f)
    )
    assert (
        _err(load_sample, f) == f"{f}: token_ids: dtype torch.float32, expected integer token ids"
    )
    p = tmp_path / "data_0.ckpt"
    base = {"input_ids": torch.arange(3), "loss_mask": torch.ones(3)}
    torch.save({**base, "aux_hidden_state": torch.ones(3, 4)}, p)
    assert _err(load_sample, p) == f"{p}: hidden_state: missing"
    torch.save({**base, "aux_hidden_state": 5, "hidden_state": torch.ones(3, 2)}, p)
    assert _err(load_sample, p) == f"{p}: aux_hidden_state: expected a tensor, got int"
    torch.save({**base, "aux_hidden_state": torch.ones(2, 4), "hidden_state": torch.ones(3, 2)}, p)
    assert _err(load_sample, p) == f"{p}: aux_hidden_state: shape (2, 4), expected [3, hidden]"
    torch.save({**base, "hidden_states": [torch.ones(3, 2), torch.ones(3, 4)]}, p)
    assert _err(load_sample, p) == f"{p}: hidden_states: slots have different widths [2, 4]"


def test_v2_row_ids_must_match_token_ids(tmp_path: Path) -> None:
    hs = _v2(
        tmp_path,
        [([1, 2, 3], [0, 1, 1])],
        arrow={"input_ids": [[1, 2, 4]], "loss_mask": [[0, 1, 1]]},
    )
    assert _err(SampleSet(hs).__getitem__, 0) == (
        f"{hs / 'hs_0.safetensors'}: token_ids: differ from the dataset row's input_ids"
    )


def test_skipped_sample_to_dict() -> None:
    from inspector.formats import SkippedSample

    s = SkippedSample(3, "a/data_3.pt", "loss_mask", "value 2 at position 1: expected 0 or 1")
    assert s.to_dict() == {
        "index": 3,
        "path": "a/data_3.pt",
        "field": "loss_mask",
        "reason": "value 2 at position 1: expected 0 or 1",
    }
    assert s.line() == "a/data_3.pt: loss_mask: value 2 at position 1: expected 0 or 1"
    bare = SkippedSample(0, "x", None, "r")
    assert bare.to_dict() == {"index": 0, "path": "x", "field": None, "reason": "r"}
    assert bare.line() == "x: r"


def test_speculators_top_level_draft_vocab_is_named_there() -> None:
    layer = {"hidden_size": 8, "num_attention_heads": 2, "intermediate_size": 8, "vocab_size": 10}
    cfg = {
        "speculators_model_type": "eagle3",
        "draft_vocab_size": 11,
        "transformer_layer_config": layer,
    }
    assert (
        _err(parse_draft_config, "c.json", cfg)
        == "c.json: draft_vocab_size: 11 exceeds vocab_size 10"
    )


def test_target_reads_only_the_tensors_it_needs(tmp_path: Path) -> None:
    from inspector.formats import read_target_head

    save_file(
        {"lm_head.weight": torch.ones(4, 2), "model.norm.weight": torch.ones(2)},
        str(tmp_path / "a.safetensors"),
    )
    index = {
        "weight_map": {
            "lm_head.weight": "a.safetensors",
            "model.norm.weight": "a.safetensors",
            "model.layers.0.x": "missing.safetensors",
        }
    }
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    head = read_target_head(
        tmp_path, vocab_size=4, hidden_size=2
    )  # the missing shard is never opened
    assert head.lm_head.shape == (4, 2)
    save_file({"lm_head.weight": torch.ones(4, 2)}, str(tmp_path / "a.safetensors"))
    index["weight_map"]["model.norm.weight"] = "gone.safetensors"
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    assert _err(read_target_head, tmp_path) == (
        f"{tmp_path / 'gone.safetensors'}: shard named by model.safetensors.index.json is missing"
    )


def test_embedding_from_a_target_is_checked_too(tmp_path: Path) -> None:
    from hostile import build_world

    w = build_world(tmp_path / "w")
    state = load_file(str(w.weights))
    del state["embed_tokens.weight"]
    save_file(state, str(w.weights))
    save_file(
        {"model.embed_tokens.weight": torch.ones(256, 8)}, str(w.target / "model.safetensors")
    )
    assert _err(load_draft, w.ckpt, target=w.target) == (
        f"{w.target / 'model.safetensors'}: model.embed_tokens.weight: shape (256, 8), expected (256, 64)"
        " (the draft's [vocab_size, hidden_size])"
    )
    state["fc.weight"] = state.pop("fc.weight")
    del state["fc.weight"]
    save_file(state, str(w.weights))
    assert (
        _err(load_draft, w.ckpt)
        == f"{w.weights}: fc.weight: tensor not found: not an EAGLE-3 draft"
    )


def test_lenient_load_notes_what_it_repaired(tmp_path: Path) -> None:
    from hostile import build_world

    w = build_world(tmp_path / "w")
    state = load_file(str(w.weights))
    state["d2t"] = state["d2t"] + torch.arange(96)
    save_file(state, str(w.weights))
    d = load_draft(w.ckpt, strict=False)
    assert d.notes == ["d2t holds absolute target ids, not offsets: read as ids"]


def test_sglang_extra_layer_shapes_are_all_checked(tmp_path: Path) -> None:
    from hostile import build_world

    w = build_world(tmp_path / "w")
    state = load_file(str(w.weights))
    g = torch.Generator().manual_seed(0)
    for name, shape in {
        "self_attn.q_proj.weight": (64, 64),
        "self_attn.k_proj.weight": (32, 64),
        "self_attn.v_proj.weight": (32, 64),
        "self_attn.o_proj.weight": (64, 64),
        "mlp.gate_proj.weight": (128, 64),
        "mlp.up_proj.weight": (128, 64),
        "mlp.down_proj.weight": (64, 128),
        "hidden_norm.weight": (64,),
        "post_attention_layernorm.weight": (3,),  # wrong: checked after the borrowed input norm
    }.items():
        state["model.additional_layers.0." + name] = torch.randn(*shape, generator=g)
    save_file(state, str(w.weights))
    cfg = json.loads(w.config.read_text())
    cfg["transformer_layer_config"]["num_hidden_layers"] = 2
    w.config.write_text(json.dumps(cfg))
    assert (
        _err(load_draft, w.ckpt)
        == f"{w.weights}: layers.1.post_attention_layernorm.weight: shape (3,), expected (64,)"
    )


def test_input_folders_with_glob_characters_only_in_patterns(tmp_path: Path) -> None:
    (tmp_path / "Xdir").mkdir()
    (tmp_path / "Xdir" / "data_0.pt").write_bytes(b"")
    assert check_out(tmp_path / "other", [tmp_path / "Xdir" / "data_0.pt"]) == tmp_path / "other"
    assert "outside" in _err(check_out, tmp_path / "Xdir" / "o", [str(tmp_path / "Xdir" / "*.pt")])


def test_check_out_not_empty_names_the_option(tmp_path: Path) -> None:
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "x").write_text("x")
    assert (
        _err(check_out, tmp_path / "o", [], "--out")
        == f"{tmp_path / 'o'}: --out: exists and is not empty: a new folder is needed"
    )


def test_os_errors_without_a_strerror(tmp_path: Path, monkeypatch) -> None:
    def fail(*a, **k):
        raise OSError("quota exceeded")

    monkeypatch.setattr(writer_mod, "save_file", fail)
    assert (
        _err(write_draft, _plan(), tmp_path / "o", field="--out")
        == f"{tmp_path / 'o'}: --out: cannot write: quota exceeded"
    )
    monkeypatch.undo()
    monkeypatch.setattr(Path, "mkdir", fail)
    assert _err(write_draft, _plan(), tmp_path / "a" / "o", field="--out") == (
        f"{tmp_path / 'a' / 'o'}: --out: cannot create: quota exceeded"
    )


def test_safetensors_reads(tmp_path: Path) -> None:
    from inspector.formats.tensorfiles import read_safetensors

    f = tmp_path / "w.safetensors"
    save_file({"a": torch.ones(2), "b": torch.zeros(3)}, str(f))
    assert list(read_safetensors(f, ["a"])) == ["a"]
    assert sorted(read_safetensors(f)) == ["a", "b"]
    raw = json.dumps({"x": {"dtype": "NEW", "shape": [1], "data_offsets": [0, 4]}}).encode()
    f.write_bytes(len(raw).to_bytes(8, "little") + raw + bytes(4))
    assert _err(read_safetensors, f).startswith(f"{f}: not a readable safetensors file: ")
    idx = tmp_path / "model.safetensors.index.json"
    save_file({"a": torch.ones(2), "b": torch.zeros(3)}, str(tmp_path / "s.safetensors"))
    idx.write_text(json.dumps({"weight_map": {"a": "s.safetensors", "b": "s.safetensors"}}))
    assert list(read_tensors(idx, ["a"])) == ["a"]
    assert _err(read_tensors, idx, ["c"]) == f"{idx}: c: not in weight_map"
    assert _err(
        find_weight_file, tmp_path / "nothing" if (tmp_path / "nothing").mkdir() is None else None
    ) == (
        f"{tmp_path / 'nothing'}: no weights found (looked for model.safetensors, "
        "model.safetensors.index.json, pytorch_model.bin, pytorch_model.bin.index.json)"
    )


def test_last_edges(tmp_path: Path) -> None:
    from inspector.formats import read_embedding
    from inspector.formats.samples import discover
    from inspector.formats.vocab import vocab_map

    # a missing path with an X in it is a missing path, not a glob
    assert _err(discover, tmp_path / "XX") == f"{tmp_path / 'XX'}: no such file or folder"
    # ids that reach V are not valid ids either: no repair, the strict error
    assert _err(vocab_map, torch.tensor([1, 4]), None, 2, 4, Path("w"), strict=False) == (
        "w: d2t: maps draft ids to target ids outside [0, 4) (offsets expected: target = draft + d2t)"
    )
    # a torch file has no header: the shape is checked once read, naming the file
    torch.save({"model.embed_tokens.weight": torch.ones(3, 2)}, tmp_path / "e.bin")
    assert _err(read_embedding, tmp_path / "e.bin", (3, 4)) == (
        f"{tmp_path / 'e.bin'}: model.embed_tokens.weight: shape (3, 2), expected (3, 4)"
        " (the draft's [vocab_size, hidden_size])"
    )


def test_values_in_messages_are_cut_to_40_characters() -> None:
    """A value quoted in an error line: its repr up to 40 characters, else 37 and '...'; an int
    past MAX_INT by its size only."""
    from inspector.formats.config import MAX_INT, _short

    assert _short("a" * 38) == "'" + "a" * 38 + "'"  # 40 characters: kept whole
    assert _short("a" * 39) == "'" + "a" * 36 + "..."  # 41: cut to 40
    assert len(_short(list(range(100)))) == 40
    assert _short(MAX_INT) == str(MAX_INT) and _short(-MAX_INT) == str(-MAX_INT)
    assert _short(MAX_INT + 1) == "an integer of 41 bits"
    base = {"hidden_size": 8, "num_attention_heads": 2, "intermediate_size": 8, "vocab_size": 10}
    scaling = {"rope_type": "yarn", "factor": 4, "mscale": "x" * 50}
    assert _err(parse_draft_config, "c.json", {**base, "rope_scaling": scaling}) == (
        "c.json: rope_scaling.mscale: expected a number, got '" + "x" * 36 + "..."
    )
