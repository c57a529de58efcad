"""Every malformed input gives one line naming the file and the field; nothing runs or is written."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from support import error_lines

from inspector.cli import main
from inspector.errors import InputError
from inspector.evaluate import Evaluator
from inspector.formats import SampleSet, load_draft


@pytest.fixture
def ckpt(golden, tmp_path) -> Path:
    dst = tmp_path / "ckpt"
    shutil.copytree(golden / "speculators-basic" / "checkpoint", dst)
    return dst


@pytest.fixture
def samples(golden, tmp_path) -> Path:
    dst = tmp_path / "samples"
    shutil.copytree(golden / "speculators-basic" / "samples", dst)
    return dst


def _edit_config(ckpt: Path, fn) -> None:
    cfg = json.loads((ckpt / "config.json").read_text())
    fn(cfg)
    (ckpt / "config.json").write_text(json.dumps(cfg))


def _edit_weights(ckpt: Path, fn) -> None:
    state = load_file(str(ckpt / "model.safetensors"))
    fn(state)
    save_file(state, str(ckpt / "model.safetensors"))


def _one_line(e: InputError) -> str:
    msg = str(e)
    assert "\n" not in msg
    return msg


def test_missing_config_key(ckpt):
    _edit_config(ckpt, lambda c: c["transformer_layer_config"].pop("hidden_size"))
    with pytest.raises(InputError) as e:
        load_draft(ckpt)
    assert "config.json" in _one_line(e.value) and "hidden_size" in str(e.value)


def test_fc_width_not_multiple_of_slot_width(ckpt):
    _edit_weights(ckpt, lambda s: s.__setitem__("fc.weight", torch.randn(64, 190)))
    with pytest.raises(InputError, match=r"model.safetensors: fc.weight: 190 input columns"):
        load_draft(ckpt)


def test_q_proj_disagrees_with_head_dim(ckpt):
    _edit_config(ckpt, lambda c: c["transformer_layer_config"].__setitem__("head_dim", 32))
    with pytest.raises(
        InputError,
        match=r"config.json: transformer_layer_config.head_dim: is 32, but q_proj.weight has 64 = 4 x 16 rows",
    ):
        load_draft(ckpt)


def test_t2d_disagrees_with_d2t(ckpt):
    def swap(state):
        t2d = state["t2d"].clone()
        first_on = int(t2d.nonzero()[0])
        first_off = int((~t2d).nonzero()[0])
        t2d[first_on], t2d[first_off] = False, True
        state["t2d"] = t2d

    _edit_weights(ckpt, swap)
    with pytest.raises(InputError, match=r"model.safetensors: d2t: disagrees with t2d"):
        load_draft(ckpt)


def test_d2t_absolute_ids_refused(ckpt):
    _edit_weights(ckpt, lambda s: s.__setitem__("d2t", s["d2t"] + torch.arange(s["d2t"].numel())))
    with pytest.raises(InputError, match=r"d2t: maps draft ids to target ids outside"):
        load_draft(ckpt)


def test_nan_in_weights(ckpt):
    def poison(state):
        state["norm.weight"][3] = float("nan")

    _edit_weights(ckpt, poison)
    with pytest.raises(InputError, match=r"norm.weight: contains NaN or Inf"):
        load_draft(ckpt)


def test_sample_hidden_size_mismatch(ckpt, samples):
    d = torch.load(samples / "data_0.pt", weights_only=True)
    d["hidden_states"] = [h[:, :32] for h in d["hidden_states"]]
    torch.save(d, samples / "data_0.pt")
    ev = Evaluator(load_draft(ckpt), SampleSet(samples))
    report = ev.run([ev.wiring("train")])
    assert report.samples == 2  # the other samples still count
    (err,) = report.skipped
    assert err.field == "hidden_states[0]" and err.path.endswith("data_0.pt")
    assert "data_0.pt: hidden_states[0]: width 32" in err.line()


def test_fewer_slots_than_wiring_needs(ckpt, samples):
    for f in samples.glob("*.pt"):
        d = torch.load(f, weights_only=True)
        d["hidden_states"] = d["hidden_states"][:2]
        torch.save(d, f)
    ev = Evaluator(load_draft(ckpt), SampleSet(samples))
    with pytest.raises(InputError, match="preset 'train' needs 3 non-verifier slots"):
        ev.wiring("train")
    with pytest.raises(InputError, match=r"slot 5 does not exist"):
        ev.wiring("0,1,5")
    with pytest.raises(InputError, match=r"has 2 slots; fc takes 3"):
        ev.wiring("0,1")


def test_nan_in_a_slot_is_reported_not_crashed(ckpt, samples):
    d = torch.load(samples / "data_1.pt", weights_only=True)
    d["hidden_states"][1][5, :] = float("nan")
    torch.save(d, samples / "data_1.pt")
    ev = Evaluator(load_draft(ckpt), SampleSet(samples))
    assert any("slot 1 contains NaN/Inf" in w for w in ev.samples[1].warnings)
    assert torch.isnan(torch.tensor(ev.slot_norms(1)[1, 5]))
    report = ev.run([ev.wiring("train")])
    assert report.samples == 3 and not report.skipped


def test_truncated_safetensors(ckpt):
    data = (ckpt / "model.safetensors").read_bytes()
    (ckpt / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(
        InputError, match=r"model.safetensors: .*data_offsets .* lie outside the file"
    ):
        load_draft(ckpt)


def test_empty_folder(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no sample files found"):
        SampleSet(tmp_path / "empty")
    with pytest.raises(InputError, match="config.json: file not found"):
        load_draft(tmp_path / "empty")


def test_missing_sample_keys(samples):
    torch.save({"input_ids": torch.arange(10), "loss_mask": torch.ones(10)}, samples / "data_0.pt")
    with pytest.raises(
        InputError, match=r"data_0.pt: unknown sample layout \(keys: input_ids, loss_mask\)"
    ):
        SampleSet(samples)[0]
    torch.save(
        {
            "input_ids": torch.arange(10),
            "hidden_states": [torch.randn(10, 64)] * 4,
            "loss_mask": torch.ones(7),
        },
        samples / "data_0.pt",
    )
    with pytest.raises(InputError, match=r"data_0.pt: loss_mask: shape \(7,\), expected \[10\]"):
        SampleSet(samples)[0]


class _Evil:
    def __reduce__(self):
        return (os.system, (f"touch {_Evil.marker}",))


def test_malicious_pickle_is_refused_and_never_runs(samples, tmp_path):
    _Evil.marker = tmp_path / "pwned"
    with open(samples / "data_0.pt", "wb") as f:
        pickle.dump({"input_ids": _Evil()}, f)
    with pytest.raises(InputError, match="data_0.pt: not a torch zip archive"):
        SampleSet(samples)[0]
    # The same object inside a torch zip archive: the safe loader refuses it, and the message
    # never passes on torch's advice to disable that loader.
    torch.save({"input_ids": _Evil()}, samples / "data_1.pt")
    with pytest.raises(InputError, match="data_1.pt: unsafe or unreadable: .*posix.system") as e:
        SampleSet(samples)[1]
    assert "weights_only" not in str(e.value) and "\n" not in str(e.value)
    assert not _Evil.marker.exists()


def test_cli_bad_input_exits_2_with_one_line(ckpt, samples, capsys):
    _edit_config(ckpt, lambda c: c["transformer_layer_config"].pop("num_attention_heads"))
    assert main(["eval", str(ckpt), str(samples)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(error_lines(err)) == 1
    assert err.startswith("eagle-inspect: error: ") and "num_attention_heads" in err


def test_inputs_never_modified(ckpt, samples):
    before = {p: p.read_bytes() for p in [*ckpt.iterdir(), *samples.iterdir()]}
    mtimes = {p: p.stat().st_mtime_ns for p in before}
    assert main(["eval", str(ckpt), str(samples), "--json", "--positions"]) == 0
    assert sorted(before) == sorted([*ckpt.iterdir(), *samples.iterdir()])
    for p, data in before.items():
        assert p.read_bytes() == data and p.stat().st_mtime_ns == mtimes[p]
