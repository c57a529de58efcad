"""torchrun sweeps: two gloo ranks give exactly the single-process report."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

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
