"""inspector.formats.writer: where a checkpoint may be written, what is written, and that a failed
write leaves nothing behind."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from inspector.errors import InputError
from inspector.formats import writer as writer_mod
from inspector.formats.writer import DraftFiles, check_out, side_files, write_draft

DEMO = Path(__file__).resolve().parent.parent / "assets" / "demo"


def _plan(**tensors: torch.Tensor) -> DraftFiles:
    return DraftFiles(
        config={"b": 1, "a": {"d": 2, "c": 3}}, tensors=tensors or {"x": torch.ones(2)}
    )


def test_writes_config_and_tensors(tmp_path: Path) -> None:
    out = write_draft(_plan(x=torch.arange(3.0)), tmp_path / "new" / "out")
    assert out == (tmp_path / "new" / "out").resolve()
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
    assert (out / "config.json").read_text() == json.dumps(
        {"b": 1, "a": {"d": 2, "c": 3}}, indent=2
    ) + "\n"
    assert torch.equal(load_file(str(out / "model.safetensors"))["x"], torch.arange(3.0))
    # No temporary sibling is left beside OUT.
    assert sorted(p.name for p in (tmp_path / "new").iterdir()) == ["out"]


def test_sorted_keys_and_an_empty_out_folder_is_fine(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    plan = DraftFiles(
        config={"b": 1, "a": {"d": 2, "c": 3}}, tensors={"x": torch.ones(1)}, sort_keys=True
    )
    write_draft(plan, tmp_path / "out")
    assert (tmp_path / "out" / "config.json").read_text().index('"a"') < (
        tmp_path / "out" / "config.json"
    ).read_text().index('"b"')


def test_out_mode_follows_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        out = write_draft(_plan(), tmp_path / "out")
    finally:
        os.umask(old)
    assert out.stat().st_mode & 0o777 == 0o755


@pytest.mark.parametrize(
    "inputs,out",
    [
        (["ckpt"], "ckpt/fixed"),
        (["ckpt"], "ckpt"),
        (["samples/data_0.pt"], "samples/sub/fixed"),  # a file's folder is an input folder
        (["samples/*.pt"], "samples/fixed"),  # so is a glob's fixed part
    ],
)
def test_out_inside_an_input_folder_is_refused(tmp_path: Path, inputs, out) -> None:
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "samples").mkdir()
    (tmp_path / "samples" / "data_0.pt").write_bytes(b"")
    with pytest.raises(InputError, match="outside the input folder") as e:
        check_out(tmp_path / out, [tmp_path / p for p in inputs], "--write-fixed")
    assert e.value.field == "--write-fixed"


def test_out_beside_the_inputs_is_fine(tmp_path: Path) -> None:
    (tmp_path / "ckpt").mkdir()
    assert check_out(tmp_path / "ckpt-fixed", [tmp_path / "ckpt", None]) == tmp_path / "ckpt-fixed"


def test_failed_write_leaves_nothing_and_the_retry_succeeds(tmp_path: Path, monkeypatch) -> None:
    real = writer_mod.save_file

    def disk_full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(writer_mod, "save_file", disk_full)
    with pytest.raises(InputError, match="cannot write: No space left on device"):
        write_draft(_plan(), tmp_path / "a" / "b" / "out", field="--write-fixed")
    assert list(tmp_path.iterdir()) == []  # neither OUT, nor its parents, nor a partial folder
    monkeypatch.setattr(writer_mod, "save_file", real)
    write_draft(_plan(), tmp_path / "a" / "b" / "out")
    assert (tmp_path / "a" / "b" / "out" / "model.safetensors").is_file()


def test_interrupted_write_leaves_nothing(tmp_path: Path, monkeypatch) -> None:
    def interrupt(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(writer_mod, "save_file", interrupt)
    with pytest.raises(KeyboardInterrupt):
        write_draft(_plan(), tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_shared_and_partial_storages_are_cloned(tmp_path: Path) -> None:
    base = torch.arange(12.0)
    tied = torch.ones(4)
    plan = _plan(a=tied, b=tied, view=base[2:6], strided=base.view(3, 4)[:, 1], whole=base)
    write_draft(plan, tmp_path / "out")
    got = load_file(str(tmp_path / "out" / "model.safetensors"))
    assert torch.equal(got["a"], tied) and torch.equal(got["b"], tied)
    assert torch.equal(got["view"], base[2:6]) and torch.equal(
        got["strided"], torch.tensor([1.0, 5, 9])
    )
    assert torch.equal(got["whole"], base)
    assert tied.data_ptr() != 0 and torch.equal(base, torch.arange(12.0))  # inputs untouched


def test_side_files_never_follow_links_out(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("outside")
    for name in ("config.json", "model.safetensors", "pytorch_model.bin", "x.index.json"):
        (ckpt / name).write_text("{}")
    (ckpt / "tokenizer.json").write_text("tok")
    (ckpt / "notes.md").symlink_to("tokenizer.json")  # a link inside the folder: fine
    (ckpt / "leak.json").symlink_to(secret)  # a link out: never followed
    (ckpt / "dev").symlink_to("/dev/null")
    (ckpt / ".hidden").write_text("h")
    (ckpt / "sub").mkdir()
    assert [p.name for p in side_files(ckpt)] == ["notes.md", "tokenizer.json"]
    write_draft(DraftFiles({}, {"x": torch.ones(1)}, side_files(ckpt)), tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "config.json",
        "model.safetensors",
        "notes.md",
        "tokenizer.json",
    ]
    assert not (tmp_path / "out" / "notes.md").is_symlink()
    with pytest.raises(InputError, match="not copied"):
        write_draft(DraftFiles({}, {"x": torch.ones(1)}, (ckpt / "leak.json",)), tmp_path / "out2")
    assert not (tmp_path / "out2").exists()


@pytest.mark.skipif(not (DEMO / "draft" / "config.json").is_file(), reason="assets/demo not built")
def test_demo_draft_resaved_through_the_writer_is_byte_identical(tmp_path: Path) -> None:
    from inspector.demo.draft import load_demo_draft, save_draft

    save_draft(load_demo_draft(DEMO / "draft"), tmp_path / "draft")
    for name in ("config.json", "model.safetensors"):
        assert (tmp_path / "draft" / name).read_bytes() == (DEMO / "draft" / name).read_bytes()
