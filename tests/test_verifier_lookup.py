"""The verifier a draft's config names, found locally (a folder or the hub cache) without --target."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support import error_lines

from inspector.cli import main
from inspector.formats.verifier import NAME_KEY, find_verifier, hub_cache_dir, verifier_name

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "assets" / "demo"


def _draft(tmp_path: Path, name: object, *, key: str = "speculators_config") -> Path:
    """A copy of the demo draft whose config names `name` as its verifier."""
    ckpt = tmp_path / "draft"
    shutil.copytree(DEMO / "draft", ckpt)
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg.pop("speculators_config", None)
    cfg[key] = {"verifier": {"name_or_path": name}}
    (ckpt / "config.json").write_text(json.dumps(cfg))
    return ckpt


def _hub_model(cache: Path, repo_id: str, revisions: list[str], ref: str | None) -> Path:
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    for rev in revisions:
        shutil.copytree(DEMO / "target", repo / "snapshots" / rev)
    if ref is not None:
        (repo / "refs").mkdir(parents=True)
        (repo / "refs" / "main").write_text(ref + "\n")
    return repo


def test_the_name_is_read_from_the_speculators_config(tmp_path):
    assert verifier_name(_draft(tmp_path / "a", " org/model ")) == "org/model"
    for bad in (None, "", "  ", 3, ["x"], {"x": 1}):
        assert verifier_name(_draft(tmp_path / repr(bad), bad)) is None
    assert verifier_name(_draft(tmp_path / "other", "org/m", key="eagle_config")) is None
    assert verifier_name(tmp_path / "nothing-here") is None
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    assert verifier_name(broken) is None  # the draft's own loader reports a bad config


def test_a_relative_or_absolute_folder(tmp_path):
    ckpt = _draft(tmp_path, "../target")
    shutil.copytree(DEMO / "target", tmp_path / "target")
    found = find_verifier(ckpt)
    assert found is not None and found.folder == tmp_path / "target"  # normalised, no "draft/.."
    assert (
        found.note() == f"--target auto: {tmp_path / 'target'} (the draft's {NAME_KEY} '../target')"
    )
    assert find_verifier(ckpt, str(tmp_path / "target")).folder == tmp_path / "target"
    assert find_verifier(ckpt, str(DEMO / "draft" / "nope")) == type(found)(
        str(DEMO / "draft" / "nope"), None
    )
    assert find_verifier(ckpt, str(DEMO / "samples")).folder is None  # no config / weights


def test_the_hub_cache_snapshot_refs_main_names(tmp_path):
    cache = tmp_path / "hub"
    ckpt = _draft(tmp_path, "org/model")
    env = {"HF_HUB_CACHE": str(cache)}
    assert find_verifier(ckpt, env=env).folder is None  # not downloaded
    repo = _hub_model(cache, "org/model", ["aaaaaaa1", "bbbbbbb2"], ref="bbbbbbb2")
    assert find_verifier(ckpt, env=env).folder == repo / "snapshots" / "bbbbbbb2"
    (repo / "refs" / "main").write_text("not-a-revision")
    assert find_verifier(ckpt, env=env).folder is None  # two snapshots and no usable ref
    shutil.rmtree(repo / "snapshots" / "aaaaaaa1")
    assert find_verifier(ckpt, env=env).folder == repo / "snapshots" / "bbbbbbb2"  # the only one
    shutil.copytree(repo / "snapshots" / "bbbbbbb2", repo / "snapshots" / "ccccccc3")
    (repo / "refs" / "main").write_text("c" * 7 + " " * 10_000)  # a ref file is read in 4 KB
    assert find_verifier(ckpt, env=env).folder is None


def test_hub_ids_never_climb_out_of_the_cache(tmp_path):
    cache = tmp_path / "hub"
    _hub_model(cache, "org/model", ["aaaaaaa1"], ref=None)
    ckpt = _draft(tmp_path, "x")
    env = {"HF_HUB_CACHE": str(cache)}
    for name in ("../org/model", "org/../model", "org/model/extra", "/org/model"):
        assert find_verifier(ckpt, name, env=env).folder is None, name


def test_hub_cache_dir_follows_the_hub_environment(tmp_path):
    home = Path.home()
    assert hub_cache_dir({"HF_HUB_CACHE": "/a", "HF_HOME": "/b"}) == Path("/a")
    assert hub_cache_dir({"HF_HOME": "/b", "XDG_CACHE_HOME": "/c"}) == Path("/b/hub")
    assert hub_cache_dir({"XDG_CACHE_HOME": "/c"}) == Path("/c/huggingface/hub")
    assert hub_cache_dir({}) == home / ".cache" / "huggingface" / "hub"
    assert hub_cache_dir({"HF_HUB_CACHE": ""}) == home / ".cache" / "huggingface" / "hub"


def _eval(capsys, argv: list[str]) -> tuple[int, str, str]:
    rc = main(["eval", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


HELD = str(DEMO / "samples" / "held")


def test_target_auto_uses_the_named_verifier_and_says_which(tmp_path, capsys):
    ckpt = _draft(tmp_path, "../target")
    shutil.copytree(DEMO / "target", tmp_path / "target")
    rc, out, err = _eval(capsys, [str(ckpt), HELD, "--limit", "2", "--json", "--target", "auto"])
    assert rc == 0, err
    assert f"note: --target auto: {tmp_path / 'target'}" in err
    assert json.loads(out)["wirings"][0]["steps"][0]["trainer"] is not None  # the trainers' metrics


def test_without_target_auto_nothing_named_is_read(tmp_path, capsys, monkeypatch):
    import inspector.formats.verifier as verifier

    ckpt = _draft(tmp_path, "../target")
    shutil.copytree(DEMO / "target", tmp_path / "target")
    monkeypatch.setattr(verifier, "find_verifier", lambda *a, **k: pytest.fail("looked it up"))
    rc, out, err = _eval(capsys, [str(ckpt), HELD, "--limit", "2"])
    assert rc == 0 and "note:" not in err
    assert "pass --target DIR (or --target auto: the draft's config names it)" in err
    rc, out, err = _eval(capsys, [str(ckpt), HELD, "--limit", "2", "--json"])
    assert json.loads(out)["wirings"][0]["steps"][0].get("trainer") is None


def test_target_auto_refuses_a_verifier_that_does_not_fit(tmp_path, capsys):
    from safetensors.torch import load_file, save_file

    ckpt = _draft(tmp_path, "../target")
    target = tmp_path / "target"
    shutil.copytree(DEMO / "target", target)
    weights = load_file(str(target / "model.safetensors"))
    head = next(k for k in weights if k.endswith("lm_head.weight"))
    weights[head] = weights[head][:100].contiguous()  # a smaller vocabulary than the draft's
    save_file(weights, str(target / "model.safetensors"))
    rc, _, err = _eval(capsys, [str(ckpt), HELD, "--limit", "2", "--target", "auto"])
    (line,) = error_lines(err)
    assert rc == 2 and str(target / "model.safetensors") in line and "lm_head.weight" in line


@pytest.mark.parametrize("name", ["org/absent-model", "/nowhere/at/all", None])
def test_target_auto_without_a_local_verifier_is_bad_input(tmp_path, capsys, monkeypatch, name):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    ckpt = _draft(tmp_path, name)
    rc, out, err = _eval(capsys, [str(ckpt), HELD, "--limit", "2", "--target", "auto"])
    assert rc == 2 and out == ""
    (line,) = error_lines(err)
    assert str(ckpt / "config.json") in line and NAME_KEY in line
    assert ("not on this machine" in line) if name else ("absent" in line)


def test_what_counts_as_a_verifier_folder(tmp_path):
    ckpt = _draft(tmp_path, "x")
    no_config = tmp_path / "no-config"
    shutil.copytree(DEMO / "target", no_config)
    (no_config / "config.json").unlink()
    assert find_verifier(ckpt, str(no_config)).folder is None  # weights alone are not a model
    cache = tmp_path / "hub"
    env = {"HF_HUB_CACHE": str(cache)}
    _hub_model(cache, "model", ["aaaaaaa1"], ref=None)  # not an org/name id
    _hub_model(cache, "org/m..x", ["aaaaaaa1"], ref=None)
    assert find_verifier(ckpt, "model", env=env).folder is None
    assert find_verifier(ckpt, "org/m..x", env=env).folder is None
    repo = _hub_model(cache, "org/model", ["aaaaaaa1", "bbbbbbb2"], ref="ccccccc3")
    assert find_verifier(ckpt, "org/model", env=env).folder is None  # the ref names no snapshot
    (repo / "refs" / "main").write_bytes(b"\xff\xfe")  # not text: refused, not an error
    assert find_verifier(ckpt, "org/model", env=env).folder is None
    (repo / "refs" / "main").write_text("bbbbbbb2")
    assert find_verifier(ckpt, "org/model", env=env).folder == repo / "snapshots" / "bbbbbbb2"
    bare = _hub_model(cache, "org/bare", [], ref=None)
    bare.mkdir(parents=True, exist_ok=True)  # a repo folder with no snapshots/ yet
    assert find_verifier(ckpt, "org/bare", env=env).folder is None
