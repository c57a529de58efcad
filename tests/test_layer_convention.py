"""data_config.json layer ids: which reading the file's own evidence decides (layer count, stated
convention, prose, writer), and the guess it records when nothing does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inspector.errors import InputError
from inspector.formats.layer_convention import (
    HF,
    LAYER_OUTPUT,
    prose_convention,
    read_layer_ids,
)
from inspector.formats.samples import read_data_config

PROSE = "HF output_hidden_states index: 0 = embedding output, k = output of decoder layer k-1"


def _read(tmp_path: Path, hs: dict, **top):
    path = tmp_path / "data_config.json"
    cfg = {"hidden_states": hs, **top}
    path.write_text(json.dumps(cfg))
    return read_layer_ids(cfg, path)


def test_nothing_stated_is_the_speculators_guess(tmp_path):
    r = _read(tmp_path, {"layer_ids": [0, 2, 4, 6]})
    assert (r.convention, r.decided_by, r.decided) == (LAYER_OUTPUT, None, False)
    assert r.hf == [1, 3, 5, 7] and r.other_hf == (0, 2, 4, 6)
    assert r.key == "hidden_states.layer_ids" and r.num_layers is None


def test_layer_count_rules_out_decoder_output_ids(tmp_path):
    r = _read(tmp_path, {"layer_ids": [0, 2, 4, 6]}, num_hidden_layers=6)
    assert (r.convention, r.decided_by, r.hf) == (HF, "layer count", [0, 2, 4, 6])
    assert r.other_hf is None and r.conflict is None and r.num_layers == 6
    # One layer more and both readings exist: the count decides nothing.
    r = _read(tmp_path, {"layer_ids": [0, 2, 4, 6]}, num_hidden_layers=7)
    assert (r.convention, r.decided_by) == (LAYER_OUTPUT, None)
    # The count may sit under hidden_states or target.
    r = _read(tmp_path, {"layer_ids": [1, 5], "num_hidden_layers": 5})
    assert (r.decided_by, r.layers_from) == (
        "layer count",
        "data_config.json hidden_states.num_hidden_layers",
    )
    r = _read(tmp_path, {"layer_ids": [1, 5]}, target={"num_hidden_layers": 5})
    assert r.decided_by == "layer count" and "target.num_hidden_layers" in r.layers_from


def test_layer_count_from_the_named_target_folder(tmp_path):
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "config.json").write_text(json.dumps({"num_hidden_layers": 6}))
    r = _read(tmp_path, {"layer_ids": [0, 2, 4, 6]}, target="t")
    assert r.decided_by == "layer count" and r.num_layers == 6
    assert r.layers_from.endswith("config.json num_hidden_layers")
    # A multimodal config keeps the count in text_config.
    (tmp_path / "t" / "config.json").write_text(
        json.dumps({"text_config": {"num_hidden_layers": 6}})
    )
    assert _read(tmp_path, {"layer_ids": [0, 6]}, target="t").decided_by == "layer count"
    # An unreadable or absent target config is no evidence.
    (tmp_path / "t" / "config.json").write_text("{")
    assert _read(tmp_path, {"layer_ids": [0, 6]}, target="t").decided_by is None
    assert _read(tmp_path, {"layer_ids": [0, 6]}, target="nowhere").decided_by is None


def test_ids_no_target_has(tmp_path):
    with pytest.raises(InputError) as e:
        _read(tmp_path, {"layer_ids": [0, 2, 7]}, num_hidden_layers=6)
    assert e.value.field == "hidden_states.layer_ids" and "above the target's 6 layers" in str(
        e.value
    )
    with pytest.raises(InputError, match="negative"):
        _read(tmp_path, {"layer_ids": [-1, 2]})


def test_stated_conventions(tmp_path):
    r = _read(tmp_path, {"layer_ids": [0, 2, 4, 6], "index_convention": "hf"})
    assert (r.convention, r.decided_by) == (HF, "index_convention")
    r = _read(tmp_path, {"layer_ids": [0, 2, 4]}, index_convention="speculators")
    assert (r.convention, r.decided_by, r.hf) == (LAYER_OUTPUT, "index_convention", [1, 3, 5])
    r = _read(tmp_path, {"layer_ids": [0, 2, 4, 6], "layer_id_convention": PROSE})
    assert (r.convention, r.decided_by) == (HF, "layer_id_convention")
    r = _read(tmp_path, {"layer_ids": [0, 2, 4, 6]}, index_note="ids are the output of layer i")
    assert (r.convention, r.decided_by) == (LAYER_OUTPUT, "index_note")
    # Prose that names neither convention decides nothing.
    r = _read(tmp_path, {"layer_ids": [0, 2, 4, 6], "layer_id_convention": "see README"})
    assert r.decided_by is None
    with pytest.raises(InputError) as e:
        _read(tmp_path, {"layer_ids": [0, 2], "index_convention": "vllm"})
    assert e.value.field == "index_convention"


def test_the_layer_count_overrules_a_stated_convention(tmp_path):
    r = _read(
        tmp_path,
        {"layer_ids": [0, 2, 4, 6], "index_convention": "speculators"},
        num_hidden_layers=6,
    )
    assert (r.convention, r.decided_by) == (HF, "layer count")
    assert "index_convention says decoder-layer output ids" in r.conflict and "id 6" in r.conflict


def test_writer_named_in_the_file(tmp_path):
    r = _read(tmp_path, {"layer_ids": [2, 16, 29, 31]}, generator="speculators 0.4.0")
    assert (r.convention, r.decided_by) == (LAYER_OUTPUT, "generator 'speculators 0.4.0'")
    r = _read(
        tmp_path, {"layer_ids": [2, 16, 29, 32]}, writer="speculators", speculators_version="0.5.1"
    )
    assert (r.convention, r.decided_by) == (HF, "writer 'speculators'")
    assert _read(tmp_path, {"layer_ids": [2, 16]}, generator="speculators").decided_by is None
    assert _read(tmp_path, {"layer_ids": [2, 16]}, generator="my tool 1.0").decided_by is None


@pytest.mark.parametrize(
    "text, conv",
    [
        (PROSE.split(",")[0], HF),
        ("0 = embedding, then one per layer", HF),
        ("HF indices", HF),
        ("decoder-layer output ids", LAYER_OUTPUT),
        ("output of layer id", LAYER_OUTPUT),
        (PROSE, HF),  # "output of decoder layer k-1" describes an HF index
        ("HF index, or the output of layer i", None),  # names both
        ("layer numbers", None),
    ],
)
def test_prose(text, conv):
    assert prose_convention(text) == conv


def test_the_sample_reader_uses_the_decided_reading(tmp_path):
    sample = tmp_path / "data_0.pt"
    (tmp_path / "data_config.json").write_text(
        json.dumps(
            {
                "hidden_states": {
                    "layer_ids": [0, 2, 4, 6],
                    "layer_id_convention": PROSE.split(",")[0],
                }
            }
        )
    )
    assert read_data_config(sample) == ([0, 2, 4, 6], tmp_path / "data_config.json")
    (tmp_path / "data_config.json").write_text(json.dumps({"hidden_states": {"layer_ids": [0, 2]}}))
    assert read_data_config(sample)[0] == [1, 3]
    (tmp_path / "data_config.json").write_text(json.dumps({"hidden_states": {}}))
    assert read_data_config(sample) == (None, tmp_path / "data_config.json")
    sub = tmp_path / "sub"
    sub.mkdir()
    assert read_data_config(sub / "data_0.pt")[1] == tmp_path / "data_config.json"


# --- what the mutation run found untested --------------------------------------------------------
def test_errors_name_the_file_and_the_field(tmp_path):
    path = tmp_path / "data_config.json"
    cases = [
        ({"hidden_states": {"layer_ids": [0], "index_convention": "x"}}, "index_convention", "'x'"),
        (
            {"hidden_states": {"layer_ids": [0, True]}},
            "hidden_states.layer_ids",
            "list of integers",
        ),
        ({"layer_ids": "0,2"}, "layer_ids", "list of integers, got '0,2'"),
        ({"layer_ids": [-2, 1]}, "layer_ids", "-2 is negative"),
        ({"layer_ids": [0, 9], "num_hidden_layers": 6}, "layer_ids", "id 9 is above"),
    ]
    for cfg, field, text in cases:
        with pytest.raises(InputError) as e:
            read_layer_ids(cfg, path)
        assert (e.value.path, e.value.field) == (str(path), field) and text in str(e.value), cfg


def test_post_norm_only_in_hf_files(tmp_path):
    path = tmp_path / "data_config.json"
    r = read_layer_ids({"layer_ids": [0, 2, "post-norm"], "index_convention": "hf"}, path)
    assert r.hf == [0, 2, None] and (r.path, r.key) == (path, "layer_ids")
    for stated in ("speculators", None):
        cfg = {"layer_ids": [0, "post-norm"]}
        if stated:
            cfg["index_convention"] = stated
        with pytest.raises(InputError):
            read_layer_ids(cfg, path)
    with pytest.raises(InputError):
        read_layer_ids({"layer_ids": [0, "other"], "index_convention": "hf"}, path)


def test_the_layer_count_given_from_elsewhere(tmp_path):
    path = tmp_path / "data_config.json"
    r = read_layer_ids({"layer_ids": [0, 6]}, path, num_layers=6)
    assert (r.decided_by, r.layers_from) == ("layer count", "the target's config.json")
    r = read_layer_ids({"layer_ids": [0, 6]}, path, num_layers=6, layers_from="T config.json")
    assert r.layers_from == "T config.json"
    # The file's own count wins over the hint.
    r = read_layer_ids({"layer_ids": [0, 6], "num_hidden_layers": 7}, path, num_layers=6)
    assert (r.decided_by, r.num_layers, r.layers_from) == (
        None,
        7,
        "data_config.json num_hidden_layers",
    )
    assert read_layer_ids({"layer_ids": [0, 6]}, path).num_layers is None
    # No ids at all: nothing above any count.
    r = read_layer_ids({"layer_ids": [], "num_hidden_layers": 6}, path)
    assert r.hf == [] and r.decided_by is None
    # A count of 0 layers is no count.
    r = read_layer_ids({"layer_ids": [0], "num_hidden_layers": 0}, path)
    assert r.num_layers is None and r.decided_by is None


def test_target_folder_counts(tmp_path):
    from inspector.formats.layer_convention import target_layer_count

    cfg = tmp_path / "config.json"
    for data, n in (
        ({"num_hidden_layers": 1}, 1),
        ({"num_hidden_layers": 0}, None),
        ({"num_hidden_layers": "6"}, None),
        ({"text_config": {"num_hidden_layers": 4}}, 4),
        ({"text_config": 3}, None),
        ([6], None),
    ):
        cfg.write_text(json.dumps(data))
        assert target_layer_count(tmp_path) == n, data
    path = tmp_path / "data_config.json"
    assert read_layer_ids({"layer_ids": [0, 4], "target": ""}, path).num_layers is None
    assert read_layer_ids({"layer_ids": [0, 4], "target": 5}, path).num_layers is None


def test_the_writer_may_be_named_under_any_of_its_keys(tmp_path):
    r = _read(tmp_path, {"layer_ids": [2, 16]}, generator="my tool 1.0", writer="speculators 0.4")
    assert (r.convention, r.decided_by) == (LAYER_OUTPUT, "writer 'speculators 0.4'")


def test_the_remaining_survivors(tmp_path):
    path = tmp_path / "data_config.json"
    # A writer named without a version is passed over for one that has it.
    r = _read(tmp_path, {"layer_ids": [2, 16]}, generator="speculators", writer="speculators 0.4")
    assert r.decided_by == "writer 'speculators 0.4'"
    # A one-layer target is a count; no ids name no layer, not even the last one.
    assert read_layer_ids({"layer_ids": [0, 1], "num_hidden_layers": 1}, path).decided_by == (
        "layer count"
    )
    assert read_layer_ids({"layer_ids": [], "num_hidden_layers": 1}, path).decided_by is None
    # Every branch keeps the file, its key and the count with where it came from.
    cfg = {
        "hidden_states": {"layer_ids": [0, 2], "index_note": "HF indices"},
        "num_hidden_layers": 8,
    }
    r = read_layer_ids(cfg, path)
    assert (r.path, r.key, r.decided_by, r.num_layers, r.layers_from) == (
        path,
        "hidden_states.layer_ids",
        "index_note",
        8,
        "data_config.json num_hidden_layers",
    )
    r = read_layer_ids({"hidden_states": {"layer_ids": [0, 8]}, "num_hidden_layers": 8}, path)
    assert (r.path, r.key, r.decided_by) == (path, "hidden_states.layer_ids", "layer count")
    r = read_layer_ids({"hidden_states": {"layer_ids": [0, 2]}}, path)
    assert (r.path, r.key, r.decided_by) == (path, "hidden_states.layer_ids", None)
