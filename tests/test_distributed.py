"""torchrun sweeps: two gloo ranks give exactly the single-process report."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch

from inspector.distributed import DistContext


def test_shards_cover_every_sample_once():
    shards = [DistContext(r, 3, r).shard(10) for r in range(3)]
    assert sorted(i for s in shards for i in s) == list(range(10))
    assert shards[0] == [0, 3, 6, 9]


@pytest.mark.skipif(shutil.which("torchrun") is None, reason="torchrun not on PATH")
def test_torchrun_two_ranks_equals_one_process(golden, tmp_path):
    root = golden / "speculators-basic"
    args = [
        "eval",
        str(root / "checkpoint"),
        str(root / "samples"),
        "--json",
        "--positions",
        "--ttt-steps",
        "2",
        "--device",
        "cpu",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    multi = subprocess.run(
        ["torchrun", "--nproc_per_node", "2", "--master_port", "29533", "-m", "inspector", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        check=True,
    )
    single = subprocess.run(
        [sys.executable, "-m", "inspector", *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    a, b = json.loads(multi.stdout), json.loads(single.stdout)
    assert a["device"] == "cpu x2"
    a["device"] = b["device"]
    assert a == b


@pytest.mark.skipif(shutil.which("torchrun") is None, reason="torchrun not on PATH")
def test_torchrun_accept_equals_one_process(tiny_synthetic):
    draft, samples = tiny_synthetic
    args = ["accept", str(draft), str(samples), "--json", "--device", "cpu", "--steps", "2"]
    args += ["--topk", "2", "--draft-tokens", "4"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    multi = subprocess.run(
        ["torchrun", "--nproc_per_node", "2", "--master_port", "29534", "-m", "inspector", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        check=True,
    )
    single = subprocess.run(
        [sys.executable, "-m", "inspector", *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env=env,
    )
    a, b = json.loads(multi.stdout), json.loads(single.stdout)
    assert a["device"] == "cpu x2"
    a["device"] = b["device"]
    assert a == b and a["samples"] == 3


def _tiny_run(draft, root):
    """Three checkpoints of the tiny draft, fc noised differently (SpecForge's folder names)."""
    from safetensors.torch import load_file, save_file

    g = torch.Generator().manual_seed(0)
    for i in range(3):
        dst = root / f"epoch_{i}_step_{(i + 1) * 10}"
        dst.mkdir(parents=True)
        shutil.copy(draft / "config.json", dst / "config.json")
        w = load_file(str(draft / "model.safetensors"))
        fc = w["fc.weight"]
        w["fc.weight"] = fc + 0.3 * i * fc.std() * torch.randn(fc.shape, generator=g)
        save_file(w, str(dst / "model.safetensors"))
    (root / "epoch_9_step_99").mkdir()  # a half-written one: the scan refuses it
    (root / "epoch_9_step_99" / "config.json").write_text("{}")
    return root


def test_merge_sweep_puts_the_ranks_checkpoints_back_in_the_runs_order():
    from inspector.distributed import merge_sweep

    def res(path):
        return SimpleNamespace(path=path, name=path)

    order = ["a", "b", "c", "d"]
    rank0 = SimpleNamespace(samples=3, results=[res("a"), res("c")], refused=[("x", "no weights")])
    rank1 = SimpleNamespace(samples=4, results=[res("d")], refused=[("b", "bad config")])
    merged = merge_sweep([Report(**vars(rank0)), Report(**vars(rank1))], order)
    assert [r.path for r in merged.results] == ["a", "c", "d"]
    assert merged.refused == [("x", "no weights"), ("b", "bad config")]
    assert merged.samples == 4


@dataclass
class Report:  # the fields of SweepRunReport that merge_sweep reads and writes
    samples: int
    results: list
    refused: list


@pytest.mark.skipif(shutil.which("torchrun") is None, reason="torchrun not on PATH")
def test_torchrun_sweep_equals_one_process_and_shares_the_state_file(tiny_synthetic, tmp_path):
    """Two ranks take the run's checkpoints in turn; rank 0 prints the one-process report (the
    timings apart) and both appended to one state file, which a later run resumes from."""
    draft, samples = tiny_synthetic
    run = _tiny_run(draft, tmp_path / "run")
    state = tmp_path / "state.jsonl"
    args = ["sweep", str(run), str(samples), "--json", "--device", "cpu", "--limit", "2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    multi = subprocess.run(
        ["torchrun", "--nproc_per_node", "2", "--master_port", "29535", "-m", "inspector"]
        + [*args, "--state", str(state)],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        check=True,
    )
    single = subprocess.run(
        [sys.executable, "-m", "inspector", *args, "--fresh"],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        check=True,
    )
    a, b = json.loads(multi.stdout), json.loads(single.stdout)
    for doc in (a, b):
        doc["state"] = None
        for c in doc["checkpoints"]:
            c.pop("seconds")
    assert a == b and len(a["checkpoints"]) == 3 and len(a["refused"]) == 1
    assert multi.stderr.count("checkpoints in") == 1  # rank 0 alone speaks
    assert len(state.read_text().splitlines()) == 3
    again = subprocess.run(
        [sys.executable, "-m", "inspector", *args, "--state", str(state)],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        check=True,
    )
    assert "3 checkpoints read from the state file" in again.stderr
