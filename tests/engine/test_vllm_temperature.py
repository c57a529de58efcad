"""The real vLLM at a temperature: its CPU build's verification fault, named by `reconcile`.

`bash .ci/vllm` also serves the demo draft (as shipped, k = 3, the eight prompts in one batch) at
temperature 0.6 with seed 0 (`.ci/run_vllm.py --temperature 0.6`, folder
t0.6/train-k3-t0.6-batch: a folder of its own, so the greedy runs' runs.json stays whole).
That build expands the requests' temperatures into a copy it never reads back, so its target
probabilities are garbage and nearly every draft is rejected (docs/vllm-cpu.md). Here: the
engine's log says a mean acceptance length near 1 with next to nothing past position 0, the live
loop at the same settings expects far more under vLLM's own rule, and reconcile names the build's
fault from the log's start-up line. The figure itself is random (1.01 to 1.09 seen in CI): now
and then it lies within the noise of the serve wiring's expectation, so the verdict rests on the
build, and only the configured wiring's shortfall is asserted of the statistics.

Without EAGLE_VLLM_RUNS these tests skip: the main suite does not install the engine.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

RUNS = os.environ.get("EAGLE_VLLM_RUNS")
pytestmark = [
    pytest.mark.skipif(
        not RUNS, reason="EAGLE_VLLM_RUNS unset: `bash .ci/vllm` runs the real vLLM and these tests"
    ),
    pytest.mark.usefixtures("one_thread"),
]
pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "assets" / "demo"
FOLDER = "train-k3-t0.6-batch"


def test_reconcile_names_the_engines_fault_in_verification_at_a_temperature(capsys):
    from inspector.cli import main

    folder = Path(RUNS or "") / "t0.6" / FOLDER
    if not (folder / "figures.json").is_file():
        pytest.fail(f"{folder}: no figures.json (the vLLM stage did not run at temperature 0.6)")
    vllm = json.loads((folder / "figures.json").read_text())
    assert vllm["temperature"] == 0.6 and vllm["k"] == 3
    capsys.readouterr()
    rc = main(
        [
            "reconcile",
            str(DEMO / "draft"),
            "--engine-log",
            str(folder / "vllm.log"),
            "--prompts",
            str(DEMO / "prompts.jsonl"),
            "--target",
            str(DEMO / "target"),
            "--temperature",
            "0.6",
            "--device",
            "cpu",
            "--json",
        ]
    )
    out = capsys.readouterr()
    assert rc == 1, out.err  # a problem found: the engine's fault
    doc = json.loads(out.out)
    assert doc["engine_log"]["accepted_per_pos"] == vllm["accepted_per_pos"]
    assert doc["verdict"] == "engine_fault", doc["summary"]
    build = doc["engine_log"]["build"]
    assert (build["version"], build["device"], build["method"]) == ("0.32.0", "cpu", "eagle3")
    assert build["spec_tokens"] == 3
    assert "vLLM 0.32.0 on cpu" in doc["summary"]
    assert "this build is known to verify wrong at a temperature" in doc["summary"]
    conf = doc["wirings"][0]
    assert conf["label"].startswith("configured")
    # the draft is expected to accept well past position 0 under vLLM's one-hot rule
    assert conf["expected"]["per_depth"][1] > 0.05
    assert min(p["z"] for p in conf["positions"]) < -4
    assert "at temperature 0.6, vllm-onehot verification" in doc["summary"]
    assert any("expands" in f or "expanded temperatures" in f for f in doc["engine_fault_classes"])
    with capsys.disabled():
        print(
            f"\nvLLM CPU at temperature 0.6: accepted per position {vllm['accepted_per_pos']} of "
            f"{vllm['num_drafts']} drafts (mean {vllm['mean_acceptance_length']:.3f}); expected "
            f"per depth {[round(x, 3) for x in conf['expected']['per_depth']]}, z "
            f"{[round(p['z'], 1) for p in conf['positions']]}"
        )
