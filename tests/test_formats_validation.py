"""The loaders' validation, piece by piece: config values, declared sizes, sample fields, the
stored vocab map, target tensors. (tests/test_hostile.py runs the same faults through the CLI.)"""

from __future__ import annotations

import json
import math
import os
import zipfile
from pathlib import Path

import pytest
import torch
from hostile import H, V, World, build_world, edit_weights, lie_about_storage, rewrite_zip
from safetensors.torch import save_file

from inspector.draft import RopeConfig
from inspector.errors import InputError
from inspector.formats import SampleSet, load_draft, load_sample, read_target_head
from inspector.formats.checkpoint import rope_config
from inspector.formats.config import ConfigReader, parse_draft_config
from inspector.formats.files import (
    check_regular,
    one_line,
    read_bytes,
    read_json,
    strip_torch_advice,
)
from inspector.formats.headers import check_torch_zip, safetensors_header
from inspector.formats.samples import FLOAT16_MAX, read_data_config, slot_warnings
from inspector.formats.tensorfiles import find_weight_file, read_tensors, shard_map, tensor_headers
from inspector.formats.vocab import integer_ids, mask_of, vocab_map


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> World:
    return build_world(tmp_path_factory.mktemp("v") / "w")


def _flat(**over) -> dict:
    cfg = {
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 128,
        "vocab_size": 256,
        "draft_vocab_size": 96,
    }
    cfg.update(over)
    return {k: v for k, v in cfg.items() if v is not None}


# --- config -------------------------------------------------------------------------------------
def test_flat_config_defaults() -> None:
    p = parse_draft_config("c.json", _flat())
    c = p.config
    assert p.layout == "specforge" and p.layer_prefix == ""
    assert (c.hidden_size, c.target_hidden_size, c.num_heads, c.num_kv_heads) == (64, 64, 4, 2)
    assert (c.head_dim, c.head_dim_explicit, c.num_layers) == (16, False, 1)
    assert (c.vocab_size, c.draft_vocab_size, c.intermediate_size) == (256, 96, 128)
    assert c.rms_norm_eps == 1e-6 and c.rope == RopeConfig(theta=10000.0)
    assert not (c.norm_before_residual or c.norm_before_fc or c.fc_norm or c.norm_output)
    assert c.aux_layer_ids is None and c.aux_layer_convention is None
    assert c.source_format == "specforge"


def test_values_are_read_as_given() -> None:
    c = parse_draft_config(
        "c.json",
        _flat(
            num_key_value_heads=None,
            head_dim=32,
            num_hidden_layers=2,
            rms_norm_eps=1e-5,
            target_hidden_size=128,
            rope_theta=5e5,
            norm_before_residual=True,
            norm_before_fc=True,
            fc_norm=True,
            norm_output=True,  # read in a flat config too, as vLLM and SGLang read it
            eagle_config={"eagle_aux_hidden_state_layer_ids": [-1, 3, 5]},
            hidden_size=64.0,  # an integral float is an integer
        ),
    ).config
    assert c.num_kv_heads == 4 and c.head_dim == 32 and c.head_dim_explicit
    assert c.num_layers == 2 and c.rms_norm_eps == 1e-5 and c.target_hidden_size == 128
    assert c.rope.theta == 5e5 and c.norm_before_residual and c.norm_before_fc and c.fc_norm
    assert c.norm_output
    assert c.aux_layer_ids == (-1, 3, 5) and c.aux_layer_convention == "sglang"
    assert isinstance(c.hidden_size, int) and c.hidden_size == 64


def test_speculators_layout_and_top_level_keys() -> None:
    cfg = {
        "speculators_model_type": "eagle3",
        "draft_vocab_size": 50,
        "target_hidden_size": 32,
        "norm_output": True,
        "eagle_aux_hidden_state_layer_ids": [0, 2, 4],
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [7]},  # the top-level key wins
        "transformer_layer_config": _flat(draft_vocab_size=None, rope_theta=123.0),
    }
    p = parse_draft_config("c.json", cfg)
    assert p.layout == "speculators" and p.layer_prefix == "transformer_layer_config."
    c = p.config
    assert (c.draft_vocab_size, c.target_hidden_size, c.norm_output) == (50, 32, True)
    assert c.aux_layer_ids == (0, 2, 4) and c.aux_layer_convention == "hf"
    assert c.rope.theta == 123.0 and c.source_format == "speculators"
    # draft_vocab_size in the layer config is read when the top level has none
    cfg["transformer_layer_config"]["draft_vocab_size"] = 70
    del cfg["draft_vocab_size"]
    assert parse_draft_config("c.json", cfg).config.draft_vocab_size == 70


@pytest.mark.parametrize(
    "key,value,field,text",
    [
        ("hidden_size", None, "hidden_size", "missing"),
        ("hidden_size", "64", "hidden_size", "expected a positive integer, got '64'"),
        ("hidden_size", 0, "hidden_size", "positive integer"),
        ("hidden_size", -1, "hidden_size", "positive integer"),
        ("hidden_size", 1.5, "hidden_size", "positive integer"),
        ("hidden_size", math.inf, "hidden_size", "positive integer"),
        ("hidden_size", True, "hidden_size", "positive integer"),
        ("num_key_value_heads", 3, "num_key_value_heads", "3 does not divide 4 heads"),
        ("head_dim", 0, "head_dim", "positive integer"),
        ("draft_vocab_size", 257, "draft_vocab_size", "257 exceeds vocab_size 256"),
        ("draft_vocab_size", "96", "draft_vocab_size", "positive integer"),
        ("rms_norm_eps", 0, "rms_norm_eps", "expected a positive number, got 0"),
        ("rms_norm_eps", "1e-5", "rms_norm_eps", "positive number"),
        ("rms_norm_eps", math.nan, "rms_norm_eps", "positive number"),
        ("rms_norm_eps", False, "rms_norm_eps", "positive number"),
        ("rope_theta", 0, "rope_theta", "a number above 1"),
        ("rope_theta", -5.0, "rope_theta", "a number above 1"),
        ("fc_norm", 1, "fc_norm", "expected true or false, got 1"),
        (
            "eagle_aux_hidden_state_layer_ids",
            [0, "2"],
            "eagle_aux_hidden_state_layer_ids",
            "list of integers",
        ),
        (
            "eagle_aux_hidden_state_layer_ids",
            3,
            "eagle_aux_hidden_state_layer_ids",
            "list of integers",
        ),
        ("eagle_config", [1], "eagle_config", "expected an object, got list"),
        ("rope_scaling", "linear", "rope_scaling", "expected an object, got str"),
        ("rope_parameters", 3, "rope_parameters", "expected an object, got int"),
    ],
)
def test_config_errors_name_the_key(key, value, field, text) -> None:
    cfg = _flat()
    cfg[key] = value
    if value is None:
        del cfg[key]
    with pytest.raises(InputError) as e:
        parse_draft_config("dir/config.json", cfg)
    assert e.value.path == "dir/config.json" and e.value.field == field
    assert text in e.value.message


def test_negative_and_repeated_ids_load_as_written() -> None:
    """Which layers an engine feeds for such ids is the doctor's finding (malformed_ids), not a
    load error: the user gets each engine's reading and the fix."""
    c = parse_draft_config(
        "c", _flat(eagle_config={"eagle_aux_hidden_state_layer_ids": [-2]})
    ).config
    assert c.aux_layer_ids == (-2,) and c.aux_layer_convention == "sglang"
    c = parse_draft_config("c", _flat(eagle_aux_hidden_state_layer_ids=[0, -1])).config
    assert c.aux_layer_ids == (0, -1) and c.aux_layer_convention == "hf"
    c = parse_draft_config("c", _flat(eagle_aux_hidden_state_layer_ids=[2, 2, 4])).config
    assert c.aux_layer_ids == (2, 2, 4)
    with pytest.raises(InputError, match="is no layer index") as e:
        parse_draft_config("c", _flat(eagle_aux_hidden_state_layer_ids=[2**41]))
    assert e.value.field == "eagle_aux_hidden_state_layer_ids"


def test_layout_errors() -> None:
    with pytest.raises(InputError, match="'medusa' is not an EAGLE-3 draft"):
        parse_draft_config("c", {"speculators_model_type": "medusa"})
    with pytest.raises(InputError) as e:
        parse_draft_config("c", {"speculators_model_type": "eagle3"})
    assert str(e.value) == "c: transformer_layer_config: missing: expected an object"
    bad = {"speculators_model_type": "eagle3", "transformer_layer_config": _flat(vocab_size=-3)}
    with pytest.raises(InputError) as e:
        parse_draft_config("c", bad)
    assert e.value.field == "transformer_layer_config.vocab_size"


def _rope(layer: dict, top: dict | None = None) -> RopeConfig:
    return rope_config(layer, top if top is not None else layer, "c.json")


def test_rope_sources_and_precedence() -> None:
    assert _rope({}) == RopeConfig(theta=10000.0)
    assert _rope({}, {"rope_theta": 7.0}).theta == 7.0  # top-level theta of a nested config
    assert _rope({"rope_theta": 3.0}, {"rope_theta": 7.0}).theta == 3.0
    params = {"rope_parameters": {"rope_theta": 9.0, "rope_type": "linear", "factor": 2.0}}
    r = _rope({"rope_theta": 3.0, **params})
    assert (r.theta, r.rope_type, r.scaling) == (9.0, "linear", {"factor": 2.0})
    # rope_parameters of type default defer to a legacy rope_scaling beside them
    r = _rope(
        {
            "rope_parameters": {"rope_theta": 5.0, "rope_type": "default"},
            "rope_scaling": {"type": "llama3", "factor": 8.0},
        }
    )
    assert (r.theta, r.rope_type, r.scaling) == (5.0, "llama3", {"factor": 8.0})
    r = _rope({"rope_scaling": {"type": "dynamic", "factor": 2.0}})
    assert (r.rope_type, r.scaling) == ("dynamic", {"factor": 2.0})
    r = _rope({}, {"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "mscale": 0}})
    assert r.rope_type == "yarn" and r.scaling == {"factor": 4.0, "mscale": 0}
    assert _rope({"rope_parameters": {"rope_type": "default"}}) == RopeConfig(theta=10000.0)


@pytest.mark.parametrize(
    "scaling,field,text",
    [
        ({"rope_type": "spiral"}, "rope_scaling.rope_type", "unknown RoPE type 'spiral'"),
        ({"type": "spiral"}, "rope_scaling.type", "unknown RoPE type"),
        ({"rope_type": 3}, "rope_scaling.rope_type", "expected a string"),
        ({"rope_type": "llama3"}, "rope_scaling.factor", "missing"),
        ({"rope_type": "yarn"}, "rope_scaling.factor", "missing"),
        ({"rope_type": "linear", "factor": 0}, "rope_scaling.factor", "positive number"),
        ({"rope_type": "dynamic", "factor": "2"}, "rope_scaling.factor", "positive number"),
        (
            {"rope_type": "llama3", "factor": 8, "low_freq_factor": -1},
            "rope_scaling.low_freq_factor",
            "positive",
        ),
        (
            {"rope_type": "llama3", "factor": 8, "high_freq_factor": "4"},
            "rope_scaling.high_freq_factor",
            "positive",
        ),
        ({"rope_type": "yarn", "factor": 4, "beta_slow": 0}, "rope_scaling.beta_slow", "positive"),
        (
            {"rope_type": "yarn", "factor": 4, "attention_factor": 0},
            "rope_scaling.attention_factor",
            "positive",
        ),
        (
            {"rope_type": "yarn", "factor": 4, "mscale": "1"},
            "rope_scaling.mscale",
            "expected a number",
        ),
        (
            {"rope_type": "yarn", "factor": 4, "mscale_all_dim": math.inf},
            "rope_scaling.mscale_all_dim",
            "number",
        ),
        (
            {"rope_type": "llama3", "factor": 8, "original_max_position_embeddings": 0.5},
            "rope_scaling.original_max_position_embeddings",
            "positive integer",
        ),
    ],
)
def test_rope_errors(scaling, field, text) -> None:
    with pytest.raises(InputError) as e:
        _rope({"rope_scaling": scaling})
    assert e.value.field == field and text in e.value.message and e.value.path == "c.json"


def test_config_reader_paths() -> None:
    r = ConfigReader("f", {"a": {"b": {"c": "x"}}})
    inner = r.sub("a").sub("b")
    with pytest.raises(InputError) as e:
        inner.positive_int("c")
    assert str(e.value) == "f: a.b.c: expected a positive integer, got 'x'"
    assert r.sub("missing") is None and r.get("a") == {"b": {"c": "x"}}
    assert r.get("zzz", 5) == 5 and r.text("zzz", "d") == "d" and r.flag("zzz", True) is True


# --- files and headers --------------------------------------------------------------------------
def test_check_regular_kinds(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_bytes(b"abc")
    assert check_regular(f) == 3
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "zero").symlink_to("/dev/zero")
    (tmp_path / "link").symlink_to(f)
    assert check_regular(tmp_path / "link") == 3  # a link to a regular file is fine
    for name, kind in (("fifo", "a FIFO"), ("zero", "a device"), (".", "a folder")):
        with pytest.raises(InputError, match=f"is {kind}, not a regular file"):
            check_regular(tmp_path / name)
    with pytest.raises(InputError, match="file not found"):
        check_regular(tmp_path / "nope")


def test_read_bytes_and_json_limits(tmp_path: Path) -> None:
    f = tmp_path / "c.json"
    f.write_text('{"a": 1}')
    assert read_bytes(f, 8) == b'{"a": 1}' and read_json(f) == {"a": 1}
    with pytest.raises(InputError, match="9 bytes: larger than the 8 bytes allowed"):
        f.write_text('{"a": 10}')
        read_bytes(f, 8)
    with pytest.raises(InputError, match="larger than"):
        read_json(f, limit=4)
    f.write_text("[1]")
    with pytest.raises(InputError, match="expected a JSON object"):
        read_json(f)
    f.write_text("{" * 50_000)
    with pytest.raises(InputError, match="not valid JSON"):
        read_json(f)


def test_torch_advice_is_never_passed_on() -> None:
    text = (
        "Weights only load failed. In PyTorch 2.6, we changed the default value of the "
        "`weights_only` argument. Re-running `torch.load` with `weights_only` set to `False` will "
        "likely succeed, but it can result in arbitrary code execution. Do it only if you got the "
        "file from a trusted source.\n\n\nTrying to load unsupported GLOBAL posix.system.\n\n"
        "Check the documentation of torch.load to learn more."
    )
    assert strip_torch_advice(text) == (
        "Weights only load failed. Trying to load unsupported GLOBAL posix.system."
    )
    assert strip_torch_advice("Re-running with weights_only=False will succeed") == (
        "refused by the safe loader"
    )
    assert one_line("a\nb\x1b[31m\tc") == "a b\\x1b[31m c"


def test_torch_zip_checks(tmp_path: Path) -> None:
    f = tmp_path / "s.pt"
    torch.save({"a": torch.arange(10), "b": [torch.ones(2, 3)[:, 1:]], "c": torch.zeros(0)}, f)
    check_torch_zip(f)
    g = tmp_path / "lie.pt"
    g.write_bytes(f.read_bytes())
    rewrite_zip(g, lie_about_storage)
    with pytest.raises(
        InputError, match=r"data/0: declares 17179869176 bytes but the record holds 80"
    ):
        check_torch_zip(g)
    rewrite_zip(g, lambda d: d)  # a re-packed archive of the original pickle is fine
    g.write_bytes(f.read_bytes())
    rewrite_zip(g, compress=True)
    with pytest.raises(InputError, match="compressed record"):
        check_torch_zip(g)
    with zipfile.ZipFile(tmp_path / "two.pt", "w") as z:
        z.writestr("a/data.pkl", b"")
        z.writestr("b/data.pkl", b"")
    with pytest.raises(InputError, match="2 found, expected one"):
        check_torch_zip(tmp_path / "two.pt")
    with zipfile.ZipFile(tmp_path / "bad.pt", "w") as z:
        z.writestr("a/data.pkl", b"\x80\x02K")  # truncated pickle
    with pytest.raises(InputError, match="data.pkl: malformed pickle"):
        check_torch_zip(tmp_path / "bad.pt")
    (tmp_path / "plain.pt").write_bytes(b"\x80\x02}q\x00.")
    with pytest.raises(InputError, match="not a torch zip archive"):
        check_torch_zip(tmp_path / "plain.pt")


def test_torch_zip_missing_record_and_huge_view(tmp_path: Path) -> None:
    f = tmp_path / "s.pt"
    torch.save({"a": torch.arange(10)}, f)
    with zipfile.ZipFile(f) as z:
        entries = [(i.filename, z.read(i.filename)) for i in z.infolist()]
    with zipfile.ZipFile(tmp_path / "norec.pt", "w") as z:
        for name, data in entries:
            if not name.endswith("/data/0"):
                z.writestr(name, data)
    with pytest.raises(InputError, match="data/0: storage record missing"):
        check_torch_zip(tmp_path / "norec.pt")

    def huge_shape(data: bytes) -> bytes:  # (10,) -> (2**31 - 1,), stride (1,)
        return data.replace(b"K\x00K\n\x85", b"K\x00J\xff\xff\xff\x7f\x85", 1)

    g = tmp_path / "shape.pt"
    g.write_bytes(f.read_bytes())
    rewrite_zip(g, huge_shape)
    with pytest.raises(
        InputError, match=r"shape \[2147483647\] needs 2147483647 elements; the record holds 10"
    ):
        check_torch_zip(g)


def test_safetensors_header_checks(tmp_path: Path) -> None:
    f = tmp_path / "w.safetensors"
    save_file({"a": torch.ones(2, 3), "b": torch.zeros(4, dtype=torch.int64)}, str(f))
    h = safetensors_header(f)
    assert h["a"].shape == (2, 3) and h["a"].dtype == "F32" and h["a"].end - h["a"].begin == 24
    assert h["b"].shape == (4,) and h["b"].end - h["b"].begin == 32
    data = f.read_bytes()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + n])

    def write(hdr: dict) -> None:
        raw = json.dumps(hdr).encode()
        f.write_bytes(len(raw).to_bytes(8, "little") + raw + data[8 + n :])

    for edit, text in [
        (
            lambda x: x["a"].__setitem__("shape", [2, 4]),
            "shape [2, 4] of F32 does not fit its 24 bytes",
        ),
        (lambda x: x["a"].__setitem__("shape", [-2, 3]), "is not a list of sizes"),
        (lambda x: x["a"].__setitem__("data_offsets", [0, 10**9]), "lie outside the file"),
        (lambda x: x["a"].__setitem__("data_offsets", [24, 0]), "lie outside the file"),
        (lambda x: x["a"].__setitem__("data_offsets", [0]), "not [begin, end]"),
        (lambda x: x["a"].pop("dtype"), "dtype missing"),
        (lambda x: x.__setitem__("a", 5), "entry is not an object"),
    ]:
        hdr = json.loads(json.dumps(header))
        edit(hdr)
        write(hdr)
        with pytest.raises(InputError) as e:
            safetensors_header(f)
        assert e.value.field == "a" and text in e.value.message
    write(
        {
            **header,
            "__metadata__": {"format": "pt"},
            "x": {"dtype": "NEW", "shape": [1], "data_offsets": [0, 0]},
        }
    )
    assert safetensors_header(f)["x"].dtype == "NEW"  # unknown dtypes: only the range is checked
    f.write_bytes((10**9).to_bytes(8, "little") + b"{}")
    with pytest.raises(InputError, match="header length 1000000000"):
        safetensors_header(f)
    f.write_bytes(b"\x02\x00")
    with pytest.raises(InputError, match="shorter than its header"):
        safetensors_header(f)
    f.write_bytes((2).to_bytes(8, "little") + b"[]")
    with pytest.raises(InputError, match="header is not an object"):
        safetensors_header(f)


# --- weight files -------------------------------------------------------------------------------
def test_hf_cache_style_symlinked_shards_are_read(tmp_path: Path) -> None:
    blobs, snap = tmp_path / "blobs", tmp_path / "snapshots" / "abc"
    blobs.mkdir()
    snap.mkdir(parents=True)
    save_file({"a": torch.ones(2)}, str(blobs / "111"))
    save_file({"b": torch.zeros(3)}, str(blobs / "222"))
    (snap / "m-1.safetensors").symlink_to(blobs / "111")
    (snap / "m-2.safetensors").symlink_to(blobs / "222")
    index = snap / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"a": "m-1.safetensors", "b": "./m-2.safetensors"}}))
    assert find_weight_file(snap) == index
    assert shard_map(index) == {"a": snap / "m-1.safetensors", "b": snap / "m-2.safetensors"}
    got = read_tensors(index)
    assert torch.equal(got["a"], torch.ones(2)) and torch.equal(got["b"], torch.zeros(3))
    assert {k: v.shape for k, v in tensor_headers(index).items()} == {"a": (2,), "b": (3,)}
    (snap / "sub").symlink_to(blobs)  # a symlinked folder leads out: refused
    index.write_text(json.dumps({"weight_map": {"a": "sub/111"}}))
    with pytest.raises(InputError, match=r"weight_map\[a\]: 'sub/111' lies outside"):
        shard_map(index)
    index.write_text(json.dumps({"weight_map": {"a": 5}}))
    with pytest.raises(InputError, match="expected a shard file name"):
        shard_map(index)
    index.write_text(json.dumps({"weight_map": {"a": "gone.safetensors"}}))
    with pytest.raises(InputError, match="shard named by model.safetensors.index.json is missing"):
        read_tensors(index)
    with pytest.raises(InputError, match="b: not in weight_map"):
        read_tensors(index, ["b"])


def test_stored_vocab_is_kept_as_stored(base: World, tmp_path: Path) -> None:
    import shutil

    ckpt = tmp_path / "c"
    shutil.copytree(base.ckpt, ckpt)
    d = load_draft(ckpt)
    assert torch.equal(d.stored_vocab.d2t, d.vocab.d2t) and torch.equal(
        d.stored_vocab.t2d, d.vocab.t2d
    )
    # absolute ids: the lenient loader repairs the map, the stored one stays as written
    edit_weights(
        World(tmp_path),
        lambda s: s.__setitem__("d2t", s["d2t"] + torch.arange(96)),
        ckpt / "model.safetensors",
    )
    lenient = load_draft(ckpt, strict=False)
    assert torch.equal(lenient.stored_vocab.d2t, d.vocab.d2t + torch.arange(96))
    assert torch.equal(lenient.vocab.d2t, d.vocab.d2t)
    assert "d2t" not in lenient.weights and "t2d" not in lenient.weights


def test_vocab_value_checks() -> None:
    wf = Path("w")
    assert integer_ids(wf, "d2t", torch.tensor([[1.0, 2.0]])).tolist() == [1, 2]
    for bad, text in [
        (torch.tensor([1.0, 2.5]), "non-integer value 2.5 at index 1"),
        (torch.tensor([1.0, math.nan]), "non-integer value nan at index 1"),
        (torch.tensor([True]), "dtype torch.bool, expected integers"),
    ]:
        with pytest.raises(InputError, match=text):
            integer_ids(wf, "d2t", bad)
    assert mask_of(wf, "t2d", torch.tensor([0, 1, 1])).tolist() == [False, True, True]
    with pytest.raises(InputError, match="holds 2 at index 2: expected 0 or 1"):
        mask_of(wf, "t2d", torch.tensor([0, 1, 2]))
    ident = vocab_map(None, None, 4, 4, wf)
    assert ident.d2t.tolist() == [0] * 4 and ident.t2d.all()
    notes: list[str] = []  # no map with D < V, strict too: the first D target ids, noted
    first = vocab_map(None, None, 2, 4, wf, notes=notes)
    assert first.d2t.tolist() == [0, 0] and first.t2d.tolist() == [True, True, False, False]
    assert notes == ["no d2t/t2d while draft_vocab_size 2 < vocab_size 4: read as target ids 0..1"]
    m = vocab_map(torch.tensor([0, 1]), None, 2, 4, wf)  # t2d rebuilt from d2t
    assert m.t2d.tolist() == [True, False, True, False]
    for args, text in [
        ((None, None, 4, 2), "absent but draft_vocab_size 4 > vocab_size 2"),
        ((None, torch.ones(4), 4, 4), "absent while t2d is present"),
        ((torch.tensor([0]), None, 2, 4), "has 1 entries, expected draft_vocab_size 2"),
        ((torch.tensor([0, 5]), None, 2, 4), "outside \\[0, 4\\)"),
        ((torch.tensor([-1, 0]), None, 2, 4), "outside \\[0, 4\\)"),
        (
            (torch.tensor([0, 1]), torch.tensor([1, 0, 1]), 2, 4),
            "has 3 entries, expected vocab_size 4",
        ),
        ((torch.tensor([0, 1]), torch.tensor([1, 1, 1, 0]), 2, 4), "marks 3 tokens"),
        ((torch.tensor([0, 1]), torch.tensor([1, 1, 0, 0]), 2, 4), "disagrees with t2d"),
    ]:
        with pytest.raises(InputError, match=text):
            vocab_map(*args, wf)


def test_lenient_vocab_repairs() -> None:
    wf, notes = Path("w"), []
    m = vocab_map(
        torch.tensor([1, 3]), torch.tensor([0, 1, 0, 1]), 2, 4, wf, strict=False, notes=notes
    )
    assert m.d2t.tolist() == [1, 2] and notes == [
        "d2t holds absolute target ids, not offsets: read as ids"
    ]
    notes.clear()
    m = vocab_map(
        torch.tensor([0, 1]), torch.tensor([1, 0, 0, 1]), 2, 4, wf, strict=False, notes=notes
    )
    assert m.d2t.tolist() == [0, 1] and m.t2d.tolist() == [True, False, True, False]
    assert notes == ["t2d disagrees with d2t: rebuilt from d2t (engines read d2t only)"]
    notes.clear()
    m = vocab_map(torch.tensor([0, 1]), None, 2, 4, wf, strict=False, notes=notes)
    assert m.t2d.tolist() == [True, False, True, False] and notes == []  # consistent: strict path
    with pytest.raises(InputError, match="outside"):
        vocab_map(torch.tensor([3, 3]), None, 2, 4, wf, strict=False, notes=notes)  # no repair


def test_draft_weight_checks(base: World, tmp_path: Path) -> None:
    import shutil

    cases = [
        (
            lambda s: s.__setitem__("norm.weight", torch.ones(3)),
            "norm.weight: shape (3,), expected (64,)",
        ),
        (lambda s: s.__setitem__("fc.weight", torch.ones(64, 100)), "fc.weight: 100 input columns"),
        (
            lambda s: s.__setitem__("fc.weight", torch.ones(64)),
            "fc.weight: shape (64,), expected [64, N*64]",
        ),
        (
            lambda s: s.__setitem__("layers.0.self_attn.q_proj.weight", torch.ones(65, 128)),
            "rows not divisible by 4 heads",
        ),
        (lambda s: s.pop("norm.weight"), "norm.weight: tensor not found"),
        (lambda s: s.pop("fc.weight"), "fc.weight: tensor not found: not an EAGLE-3 draft"),
        (
            lambda s: s.pop("layers.0.mlp.up_proj.weight"),
            "layers.0.mlp.up_proj.weight: tensor not found",
        ),
        (
            lambda s: s.__setitem__("layers.0.self_attn.q_norm.weight", torch.ones(7)),
            "q_norm.weight: shape (7,), expected (16,)",
        ),
        (
            lambda s: s.__setitem__("input_norm.weight", torch.ones(5)),
            "input_norm.weight: shape (5,), expected (192,)",
        ),
        (
            lambda s: s.__setitem__("fc_norm.0.weight", torch.ones(64)),
            "fc_norm.1.weight: tensor not found",
        ),
        (
            lambda s: s.__setitem__("lm_head.weight", torch.ones(95, 64)),
            "lm_head.weight: shape (95, 64), expected (96, 64) (draft_vocab_size)",
        ),
        (
            lambda s: s.__setitem__("model.norm.weight", torch.ones(64)),
            "a second tensor named norm.weight",
        ),
        (
            lambda s: s.__setitem__("norm.weight", s["norm.weight"].double() * math.inf),
            "norm.weight: contains NaN or Inf",
        ),
        (
            lambda s: s.__setitem__("lm_head.weight", torch.ones(96, 64, dtype=torch.int32)),
            "dtype torch.int32, expected a floating type",
        ),
    ]
    for i, (edit, text) in enumerate(cases):
        ckpt = tmp_path / str(i)
        shutil.copytree(base.ckpt, ckpt)
        edit_weights(World(tmp_path), edit, ckpt / "model.safetensors")
        with pytest.raises(InputError) as e:
            load_draft(ckpt)
        assert text in str(e.value)


def test_config_flags_need_their_tensors(base: World, tmp_path: Path) -> None:
    import shutil

    for flag, text in (
        ("norm_before_fc", "input_norm.weight: tensor not found"),
        ("fc_norm", "fc_norm.0.weight: tensor not found"),
    ):
        ckpt = tmp_path / flag
        shutil.copytree(base.ckpt, ckpt)
        cfg = json.loads((ckpt / "config.json").read_text())
        cfg[flag] = True
        (ckpt / "config.json").write_text(json.dumps(cfg))
        with pytest.raises(InputError, match=text):
            load_draft(ckpt)


def test_missing_head_dim_lenient_and_strict(base: World, tmp_path: Path) -> None:
    import shutil

    ckpt = tmp_path / "c"
    shutil.copytree(base.ckpt, ckpt)
    cfg = json.loads((ckpt / "config.json").read_text())
    del cfg["transformer_layer_config"]["head_dim"]  # hidden_size / heads = 16
    (ckpt / "config.json").write_text(json.dumps(cfg))

    def heads_of_32(s: dict) -> None:  # 4 query heads and 2 kv heads of 32
        p = "layers.0.self_attn."
        s[p + "q_proj.weight"] = torch.randn(128, 128) / 16
        s[p + "k_proj.weight"] = torch.randn(64, 128) / 16
        s[p + "v_proj.weight"] = torch.randn(64, 128) / 16
        s[p + "o_proj.weight"] = torch.randn(64, 128) / 16

    edit_weights(World(tmp_path), heads_of_32, ckpt / "model.safetensors")
    with pytest.raises(
        InputError,
        match=r"transformer_layer_config.head_dim \(absent: hidden_size/heads\): is 16, but q_proj.weight has 128 = 4 x 32 rows",
    ):
        load_draft(ckpt)
    d = load_draft(ckpt, strict=False)
    assert d.config.head_dim == 32 and not d.config.head_dim_explicit
    assert d.notes == [
        "head_dim absent from config.json: 32 taken from q_proj (hidden_size/heads = 16)"
    ]


# --- samples --------------------------------------------------------------------------------
def _sample(tmp_path: Path, **over) -> Path:
    d = {
        "input_ids": torch.tensor([1, 2, 3, 4, 5]),
        "hidden_states": [torch.randn(5, 8) for _ in range(3)],
        "loss_mask": torch.tensor([0, 0, 1, 1, 1]),
    }
    d.update(over)
    f = tmp_path / "data_0.pt"
    torch.save(d, f)
    return f


def test_sample_validation(tmp_path: Path) -> None:
    s = load_sample(_sample(tmp_path), vocab_size=6)
    assert s.input_ids.dtype == torch.int64 and s.loss_mask.dtype == torch.int64 and not s.warnings
    s = load_sample(_sample(tmp_path, loss_mask=torch.tensor([0.0, 1, 1, 0, 1])))
    assert s.loss_mask.tolist() == [0, 1, 1, 0, 1]
    s = load_sample(_sample(tmp_path, loss_mask=torch.tensor([0, 1, 1, 0, 1], dtype=torch.bool)))
    assert s.loss_mask.tolist() == [0, 1, 1, 0, 1]
    s = load_sample(_sample(tmp_path, input_ids=torch.tensor([[1, 2, 3, 4, 5]], dtype=torch.int32)))
    assert s.input_ids.tolist() == [1, 2, 3, 4, 5]
    for over, field, text in [
        (
            {"input_ids": torch.tensor([1, 2, 3, 4, 6])},
            "input_ids",
            "token id 6 at position 4 is outside the vocabulary [0, 6)",
        ),
        (
            {"input_ids": torch.tensor([1, -2, 3, 4, 5])},
            "input_ids",
            "token id -2 at position 1 is outside",
        ),
        (
            {"input_ids": torch.tensor([1.0, 2, 3, 4, 5])},
            "input_ids",
            "dtype torch.float32, expected integer token ids",
        ),
        ({"input_ids": torch.tensor([True] * 5)}, "input_ids", "dtype torch.bool"),
        ({"input_ids": torch.tensor([1, 2])}, "input_ids", "T >= 3"),
        (
            {"loss_mask": torch.tensor([0, 2, 1, 1, 1])},
            "loss_mask",
            "value 2 at position 1: expected 0 or 1",
        ),
        ({"loss_mask": torch.tensor([0, 0, -1, 1, 1])}, "loss_mask", "value -1 at position 2"),
        ({"loss_mask": torch.tensor([0, 0, 0.5, 1, 1])}, "loss_mask", "value 0.5 at position 2"),
        ({"loss_mask": torch.tensor([0, 1])}, "loss_mask", "shape (2,), expected [5]"),
        (
            {"hidden_states": [torch.randn(5, 8), "x"]},
            "hidden_states[1]",
            "expected a tensor, got str",
        ),
        ({"hidden_states": [torch.randn(5, 8)]}, "hidden_states", "1 slots; at least 2 expected"),
        (
            {"hidden_states": [torch.randn(5, 8), torch.randn(5, 4)]},
            "hidden_states",
            "different widths [4, 8]",
        ),
        (
            {"hidden_states": [torch.randn(5, 8), torch.ones(5, 8, dtype=torch.long)]},
            "hidden_states[1]",
            "expected one of float16, bfloat16, float32, float64",
        ),
        (
            {"hidden_states": [torch.randn(5, 8), torch.randn(4, 8)]},
            "hidden_states[1]",
            "expected [5, hidden]",
        ),
    ]:
        with pytest.raises(InputError) as e:
            load_sample(_sample(tmp_path, **over), vocab_size=6)
        assert (e.value.field, text in e.value.message) == (field, True), str(e.value)
    with pytest.raises(InputError, match="token id -2 at position 1 is negative"):
        load_sample(_sample(tmp_path, input_ids=torch.tensor([1, -2, 3, 4, 5])))


def test_slot_warnings_name_non_finite_and_float16_overflow() -> None:
    ok = torch.ones(4, 3)
    nan = ok.clone()
    nan[1, 1] = math.nan
    f16 = torch.ones(4, 3, dtype=torch.float16)
    f16[0, 0] = FLOAT16_MAX
    inf16 = torch.ones(4, 3, dtype=torch.float16)
    inf16[2, 2] = math.inf
    big32 = ok * 1e5
    assert slot_warnings([ok, ok.half()]) == []
    w = slot_warnings([nan, f16, inf16, big32])
    assert w == [
        "slot 0 contains NaN/Inf",
        "slot 1 reaches the float16 limit 65504: the capture overflowed",
        "slot 2 contains NaN/Inf",
        "slot 2 reaches the float16 limit 65504: the capture overflowed",
    ]  # float32 values beyond float16's range are the evaluator's concern (its dtype)


def test_specforge_and_v0_slot_splits(tmp_path: Path) -> None:
    t = 5
    f = _sample(tmp_path, hidden_states=None)
    torch.save(
        {
            "input_ids": torch.arange(t),
            "loss_mask": torch.ones(t),
            "aux_hidden_state": torch.randn(1, t, 24),
            "hidden_state": torch.randn(1, t, 8),
        },
        f,
    )
    s = load_sample(f)
    assert s.format == "specforge" and [x.shape for x in s.slots] == [(t, 8)] * 4
    torch.save(
        {
            "input_ids": torch.arange(t),
            "loss_mask": torch.ones(t),
            "aux_hidden_state": torch.randn(t, 20),
            "hidden_state": torch.randn(t, 8),
        },
        f,
    )
    with pytest.raises(InputError, match="aux_hidden_state: width 20 not a multiple of 8"):
        load_sample(f)
    torch.save(
        {
            "input_ids": torch.arange(t),
            "loss_mask": torch.ones(t),
            "hidden_state": torch.randn(t, 16),
            "target": torch.randn(t, 8),
        },
        f,
    )
    s = load_sample(f)
    assert s.format == "speculators-v0" and len(s.slots) == 3 and s.slot_info[-1].verifier


def test_sample_set_skips_bad_files_once(tmp_path: Path, monkeypatch) -> None:
    import inspector.formats.sample_set as samples_mod

    folder = tmp_path / "s"
    folder.mkdir()
    for i in range(3):
        ids = torch.tensor([1, 2, 3, 9 if i == 0 else 4])
        torch.save(
            {
                "input_ids": ids,
                "hidden_states": [torch.randn(4, 8)] * 3,
                "loss_mask": torch.ones(4),
            },
            folder / f"data_{i}.pt",
        )
    calls = []
    real = samples_mod.load_sample
    monkeypatch.setattr(
        samples_mod, "load_sample", lambda *a, **k: calls.append(a[0]) or real(*a, **k)
    )
    ss = SampleSet(folder, vocab_size=5)
    assert ss.first.path == str(folder / "data_1.pt") and ss.format == "speculators-v1"
    assert len(ss.slot_info) == 3
    for _ in range(2):
        with pytest.raises(InputError, match="token id 9"):
            ss[0]
    assert calls.count(folder / "data_0.pt") == 1  # read once, then its error is remembered
    (sk,) = ss.skipped
    assert (sk.index, sk.path, sk.field) == (0, str(folder / "data_0.pt"), "input_ids")
    assert "outside the vocabulary [0, 5)" in sk.reason
    assert SampleSet(folder).first.path == str(folder / "data_0.pt")  # no vocab: id 9 is fine


def test_sample_set_with_no_usable_file(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    folder.mkdir()
    for i in range(2):
        torch.save(
            {
                "input_ids": torch.tensor([1, 2, 3]),
                "hidden_states": [torch.randn(3, 8)] * 2,
                "loss_mask": torch.tensor([0, 1, 5]),
            },
            folder / f"data_{i}.pt",
        )
    ss = SampleSet(folder)
    with pytest.raises(InputError) as e:
        _ = ss.first
    assert e.value.path == str(folder / "data_0.pt") and e.value.field == "loss_mask"
    assert e.value.message.endswith("; none of the 2 sample files is usable")
    assert [s.index for s in ss.skipped] == [0, 1]
    with pytest.raises(InputError) as e:
        _ = SampleSet(folder / "data_1.pt").first
    assert "none of" not in e.value.message  # one file: no count


def test_data_config_conventions(tmp_path: Path) -> None:
    f = tmp_path / "data_0.pt"
    cfg = tmp_path / "data_config.json"
    assert read_data_config(f) == (None, None)
    cfg.write_text(json.dumps({"hidden_states": {"layer_ids": [0, 2]}}))
    assert read_data_config(f) == ([1, 3], cfg)  # speculators numbering: + 1
    cfg.write_text(json.dumps({"layer_ids": [0, 2], "index_convention": "hf"}))
    assert read_data_config(f) == ([0, 2], cfg)
    cfg.write_text(json.dumps({"hidden_states": {"note": "no ids"}}))
    assert read_data_config(f) == (None, cfg)
    cfg.write_text(json.dumps({"layer_ids": [0, -2]}))
    with pytest.raises(InputError, match="layer_ids: -2 is negative"):
        read_data_config(f)
    cfg.write_text(json.dumps({"layer_ids": "0,2"}))
    with pytest.raises(InputError, match="layer_ids: expected a list of integers"):
        read_data_config(f)
    sub = tmp_path / "sub"
    sub.mkdir()
    cfg.write_text(json.dumps({"layer_ids": [1], "index_convention": "hf"}))
    assert read_data_config(sub / "data_0.pt") == ([1], cfg)  # one folder up


# --- target -------------------------------------------------------------------------------------
def test_target_head_checks(base: World) -> None:
    head = read_target_head(base.target, vocab_size=V, hidden_size=H)
    assert head.lm_head.shape == (V, H) and head.norm_weight.shape == (H,)
    assert head.rms_norm_eps == 1e-5 and head.path == str(base.target)
    assert read_target_head(base.target).lm_head.shape == (V, H)  # unchecked without a draft
    with pytest.raises(
        InputError, match=r"lm_head.weight: shape \(256, 64\), expected \(300, 64\)"
    ):
        read_target_head(base.target, vocab_size=300, hidden_size=H)
    with pytest.raises(InputError, match=r"model.norm.weight: shape \(64,\), expected \(32,\)"):
        read_target_head(_only_norm(base), vocab_size=V, hidden_size=32)


def _only_norm(base: World) -> Path:
    # A target whose lm_head fits a hidden size of 32 but whose norm does not.
    folder = base.root.parent / "t32"
    if not folder.exists():
        folder.mkdir()
        save_file(
            {"lm_head.weight": torch.ones(V, 32), "model.norm.weight": torch.ones(H)},
            str(folder / "model.safetensors"),
        )
    return folder


def test_target_tied_head_and_nested_config(tmp_path: Path) -> None:
    save_file(
        {"model.language_model.embed_tokens.weight": torch.ones(8, 4)},
        str(tmp_path / "model.safetensors"),
    )
    (tmp_path / "config.json").write_text(
        json.dumps({"text_config": {"tie_word_embeddings": True, "rms_norm_eps": 0.5}})
    )
    head = read_target_head(tmp_path, vocab_size=8, hidden_size=4)
    assert head.lm_head.shape == (8, 4) and head.norm_weight is None and head.rms_norm_eps == 0.5
    (tmp_path / "config.json").write_text(json.dumps({"tie_word_embeddings": False}))
    with pytest.raises(InputError, match="lm_head.weight: tensor not found"):
        read_target_head(tmp_path)


# --- tokenizer ----------------------------------------------------------------------------------
def test_tokenizer_file_is_read_safely(tmp_path: Path) -> None:
    from inspector.formats.tokenizer import TokenDecoder, find_tokenizer

    os.mkfifo(tmp_path / "tokenizer.json")
    with pytest.raises(InputError, match="no tokenizer.json here"):
        find_tokenizer(tmp_path)
    with pytest.raises(InputError, match="is a FIFO, not a regular file"):
        TokenDecoder.load(tmp_path / "tokenizer.json")
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(65 * 2**20)
    with pytest.raises(InputError, match="larger than the 67108864 bytes allowed"):
        TokenDecoder.load(big)
    (tmp_path / "bad.json").write_text('{"model": 3}')
    with pytest.raises(InputError, match="not a readable tokenizer.json") as e:
        TokenDecoder.load(tmp_path / "bad.json")
    assert "\n" not in str(e.value)


def test_read_embedding_sources(tmp_path: Path) -> None:
    from inspector.formats import read_embedding

    emb = torch.randn(8, 4)
    save_file(
        {"model.embed_tokens.weight": emb, "x": torch.ones(1)}, str(tmp_path / "e.safetensors")
    )
    assert torch.equal(read_embedding(tmp_path / "e.safetensors", (8, 4)), emb)
    assert torch.equal(read_embedding(tmp_path / "e.safetensors"), emb)  # any shape
    with pytest.raises(InputError) as e:
        read_embedding(tmp_path / "e.safetensors", (8, 5))
    assert str(e.value) == (
        f"{tmp_path / 'e.safetensors'}: model.embed_tokens.weight: shape (8, 4), expected (8, 5)"
        " (the draft's [vocab_size, hidden_size])"
    )
    # a target folder whose LM is nested (multimodal), weights in a torch .bin (no header)
    folder = tmp_path / "t"
    folder.mkdir()
    torch.save({"model.language_model.embed_tokens.weight": emb}, folder / "pytorch_model.bin")
    assert torch.equal(read_embedding(folder, (8, 4)), emb)
    with pytest.raises(InputError) as e:
        read_embedding(folder, (9, 4))
    assert e.value.field == "model.language_model.embed_tokens.weight"
    assert (
        e.value.message == "shape (8, 4), expected (9, 4) (the draft's [vocab_size, hidden_size])"
    )
    save_file({"norm.weight": torch.ones(4)}, str(tmp_path / "n.safetensors"))
    with pytest.raises(InputError) as e:
        read_embedding(tmp_path / "n.safetensors")
    assert (
        str(e.value) == f"{tmp_path / 'n.safetensors'}: model.embed_tokens.weight: tensor not found"
    )
    with pytest.raises(InputError) as e:
        read_embedding(tmp_path / "gone.safetensors")
    assert str(e.value) == f"{tmp_path / 'gone.safetensors'}: file not found"
    for bad, text in (
        (torch.ones(8, 4, dtype=torch.int64), "dtype torch.int64, expected a floating type"),
        (torch.full((8, 4), math.nan), "contains NaN or Inf"),
    ):
        save_file({"embed_tokens.weight": bad}, str(tmp_path / "b.safetensors"))
        with pytest.raises(InputError) as e:
            read_embedding(tmp_path / "b.safetensors", (8, 4))
        assert str(e.value) == f"{tmp_path / 'b.safetensors'}: embed_tokens.weight: {text}"


def test_target_head_to_device_and_dtype(base: World) -> None:
    head = read_target_head(base.target, vocab_size=V, hidden_size=H)
    moved = head.to("cpu", torch.float16)
    assert moved.lm_head.dtype == torch.float16 and moved.norm_weight.dtype == torch.float16
    assert torch.allclose(moved.lm_head.float(), head.lm_head, atol=1e-2)
    assert (moved.rms_norm_eps, moved.path) == (head.rms_norm_eps, head.path)
    no_norm = type(head)(None, head.lm_head, 0.1, "p").to("cpu")
    assert no_norm.norm_weight is None and no_norm.lm_head.dtype == torch.float32
    assert (no_norm.rms_norm_eps, no_norm.path) == (0.1, "p")


def test_target_head_errors_name_the_file(tmp_path: Path) -> None:
    save_file({"model.norm.weight": torch.ones(4)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(InputError) as e:
        read_target_head(tmp_path)
    assert str(e.value) == f"{tmp_path / 'model.safetensors'}: lm_head.weight: tensor not found"
    (tmp_path / "config.json").write_text(json.dumps({"rms_norm_eps": -1}))
    with pytest.raises(InputError) as e:
        read_target_head(tmp_path)
    assert (
        str(e.value)
        == f"{tmp_path / 'config.json'}: rms_norm_eps: expected a positive number, got -1"
    )
    save_file(
        {"lm_head.weight": torch.ones(6, 4), "model.norm.weight": torch.ones(4)},
        str(tmp_path / "model.safetensors"),
    )
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(InputError) as e:
        read_target_head(tmp_path, vocab_size=6, hidden_size=5)
    assert e.value.message == (
        "shape (6, 4), expected (6, 5) (the draft's vocab_size and target_hidden_size)"
    )
    head = read_target_head(tmp_path, vocab_size=6)  # half a shape: nothing checked
    assert head.rms_norm_eps == 1e-6 and head.norm_weight.shape == (4,)


@pytest.mark.parametrize(
    "field,edit,text",
    [
        (
            "hidden_states[1]",
            lambda d: d["hidden_states"].__setitem__(1, torch.randn(1, 8).expand(2_000_000, 8)),
            "(a broadcast view): expected plain data",
        ),
        (
            "hidden_states[1]",
            lambda d: d["hidden_states"].__setitem__(1, d["hidden_states"][1].to_sparse()),
            "torch.sparse_coo layout: expected a dense tensor",
        ),
        (
            "hidden_states[1]",
            lambda d: d["hidden_states"].__setitem__(1, d["hidden_states"][1].to("meta")),
            "on device meta: expected stored data",
        ),
        (
            "hidden_states[1]",
            lambda d: d["hidden_states"].__setitem__(
                1, d["hidden_states"][1].to(torch.float8_e4m3fn)
            ),
            "dtype torch.float8_e4m3fn, expected one of float16, bfloat16, float32, float64",
        ),
        (
            "input_ids",
            lambda d: d.__setitem__("input_ids", d["input_ids"].to_sparse()),
            "torch.sparse_coo layout: expected a dense tensor",
        ),
        (
            "loss_mask",
            lambda d: d.__setitem__("loss_mask", d["loss_mask"].to("meta")),
            "on device meta: expected stored data",
        ),
    ],
)
def test_samples_that_are_not_plain_stored_data_are_refused(tmp_path, field, edit, text):
    data = {
        "input_ids": torch.arange(5),
        "hidden_states": [torch.randn(5, 8), torch.randn(5, 8)],
        "loss_mask": torch.ones(5, dtype=torch.long),
    }
    edit(data)
    torch.save(data, tmp_path / "data_0.pt")
    with pytest.raises(InputError) as e:
        load_sample(tmp_path / "data_0.pt")
    assert (e.value.field, e.value.message.endswith(text)) == (field, True), e.value.message


def test_every_sample_must_match_the_first_usable_ones_slots(tmp_path):
    def save(i, n_slots, width):
        torch.save(
            {
                "input_ids": torch.arange(5),
                "hidden_states": [torch.randn(5, width) for _ in range(n_slots)],
                "loss_mask": torch.ones(5, dtype=torch.long),
            },
            tmp_path / f"data_{i}.pt",
        )

    (tmp_path / "data_0.pt").write_bytes(b"not a sample")
    save(1, 4, 8)
    save(2, 3, 8)  # a slot fewer
    save(3, 4, 6)  # narrower
    save(4, 4, 8)
    ss = SampleSet(tmp_path)
    assert ss[4].slots[0].shape == (5, 8)  # read first, it is still checked against file 1
    for i, (n, w) in ((2, (3, 8)), (3, (4, 6))):
        with pytest.raises(InputError) as e:
            ss[i]
        assert e.value.field == "hidden_states"
        assert e.value.message == (
            f"{n} slots of width {w}; the set's first usable sample has 4 of width 8"
        )
    assert [s.index for s in ss.skipped] == [0, 2, 3]
    assert ss.first_index == 1


def test_sample_warnings_are_recorded_once_per_file(tmp_path):
    slots = [torch.randn(5, 8), torch.randn(5, 8)]
    slots[1][2, 3] = math.nan
    torch.save(
        {"input_ids": torch.arange(5), "hidden_states": slots, "loss_mask": torch.ones(5)},
        tmp_path / "data_0.pt",
    )
    torch.save(
        {
            "input_ids": torch.arange(5),
            "hidden_states": [torch.randn(5, 8), torch.randn(5, 8)],
            "loss_mask": torch.ones(5),
        },
        tmp_path / "data_1.pt",
    )
    ss = SampleSet(tmp_path, cache_bytes=0)  # nothing cached: every read loads again
    for _ in range(2):
        ss[0], ss[1]
    (w,) = ss.warnings
    assert (w.index, w.path, w.warning) == (
        0,
        str(tmp_path / "data_0.pt"),
        "slot 1 contains NaN/Inf",
    )
    assert w.line() == f"{tmp_path / 'data_0.pt'}: slot 1 contains NaN/Inf"
    assert w.to_dict() == {"index": 0, "path": w.path, "warning": w.warning}


def test_with_the_drafts_width_a_wrong_first_file_does_not_set_the_reference(tmp_path):
    for i, width in enumerate((6, 8, 8)):
        torch.save(
            {
                "input_ids": torch.arange(5),
                "hidden_states": [torch.randn(5, width) for _ in range(3)],
                "loss_mask": torch.ones(5, dtype=torch.long),
            },
            tmp_path / f"data_{i}.pt",
        )
    ss = SampleSet(tmp_path, hidden_size=8)
    assert ss.first_index == 1 and ss[2].slots[0].shape == (5, 8)
    (sk,) = ss.skipped
    assert (sk.index, sk.field) == (0, "hidden_states[0]")
    assert sk.reason.startswith("width 6 but the draft's fc expects target_hidden_size 8: ")
    assert SampleSet(tmp_path).first_index == 0  # without it, file 0 is the reference


def test_sample_set_reads_each_file_once_and_forgets_on_request(tmp_path, monkeypatch):
    import inspector.formats.sample_set as sample_set_mod
    from inspector.formats import SkippedSample

    for i in range(3):
        torch.save(
            {
                "input_ids": torch.arange(5),
                "hidden_states": [torch.randn(5, 8), torch.randn(5, 8)],
                "loss_mask": torch.ones(5, dtype=torch.long),
            },
            tmp_path / f"data_{i}.pt",
        )
    loads = []
    real = sample_set_mod.load_sample
    monkeypatch.setattr(
        sample_set_mod, "load_sample", lambda p, *a, **k: loads.append(p.name) or real(p, *a, **k)
    )
    ss = SampleSet(tmp_path)
    ss[1]  # the first usable file is found first (file 0), then 1 is read once
    assert loads == ["data_0.pt", "data_1.pt"]
    ss[1], ss[0]
    assert len(loads) == 2
    ss.forget(1)
    ss[1]
    assert loads[-1] == "data_1.pt" and len(loads) == 3
    with pytest.raises(IndexError):
        ss[3]
    with pytest.raises(IndexError):
        ss[-1]
    e = InputError("a/b.pt", "loss_mask", "value 2")
    assert SkippedSample.from_error(4, "given.pt", e) == SkippedSample(
        4, "a/b.pt", "loss_mask", "value 2"
    )
    plain = SkippedSample.from_error(None, "given.pt", ValueError("boom"))
    assert plain == SkippedSample(None, "given.pt", None, "boom")


def test_set_level_refusals_name_the_file(tmp_path):
    for i, (n, w) in enumerate(((2, 8), (2, 6), (3, 8))):
        torch.save(
            {
                "input_ids": torch.arange(5),
                "hidden_states": [torch.randn(5, w) for _ in range(n)],
                "loss_mask": torch.ones(5, dtype=torch.long),
            },
            tmp_path / f"data_{i}.pt",
        )
    for ss, bad in ((SampleSet(tmp_path, hidden_size=8), 1), (SampleSet(tmp_path), 2)):
        assert ss.first_index == 0
        with pytest.raises(InputError) as e:
            ss[bad]
        assert e.value.path == str(tmp_path / f"data_{bad}.pt")
