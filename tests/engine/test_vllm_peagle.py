"""The real vLLM serving a P-EAGLE (parallel drafting) draft against our replay, to the last count.

vLLM's CPU build 0.32.0 serves a speculators `peagle` draft with `speculative_config={"method":
"eagle3", "model": DRAFT, "num_speculative_tokens": 3, "parallel_drafting": True}` (docs/peagle.md,
*Under vLLM's CPU build 0.32*). The demo has no P-EAGLE draft, so `build_peagle_draft` makes one
from the demo's EAGLE-3 draft (deterministic: mask token 511, mask_hidden = the mean of the train
wiring's slots over assets/demo/samples/train). Measured on it: 666 drafts, 356 accepted
([356, 0, 0] per position), every request's per_step_accepted equal, one at a time and batched.

`.ci/vllm` runs it (step 3d):

    python tests/engine/test_vllm_peagle.py --build "$work/peagle-draft"
    "$venv/bin/python" .ci/run_vllm.py --target assets/demo/target \
        --draft peagle="$work/peagle-draft" --parallel peagle --prompts "$out/prompts.json" \
        --k 3 --max-tokens 128 --dtype float32 --out "$out/peagle"

`--parallel NAME` adds `"parallel_drafting": True` to that variant's speculative_config (vLLM does
not read it from the draft: its speculators override applies to `model=`, the target, only). The
folders are peagle/peagle-k3-{one,batch}, beside the greedy runs, not in their folder (each
run_vllm.py call writes its own runs.json).

Without EAGLE_VLLM_RUNS these tests skip; with it, a missing peagle run fails.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "assets" / "demo"
K = 3
MAX_TOKENS = 128
MASK_TOKEN_ID = 511  # not special: the demo vocab's only special token is 0 (BOS = EOS)
TRAIN = (0, 1, 2)  # the demo draft's ids [0, 2, 4]: embed, L2, L4


def build_peagle_draft(dst: Path) -> Path:
    """A P-EAGLE copy of the demo's EAGLE-3 draft in `dst` (replaced)."""
    import torch
    from safetensors.torch import load_file, save_file

    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(DEMO / "draft", dst)
    total = torch.zeros(3 * 128, dtype=torch.float64)
    rows = 0
    for f in sorted((DEMO / "samples" / "train").glob("data_*.pt")):
        d = torch.load(f, weights_only=True)
        x = torch.cat([d["hidden_states"][i] for i in TRAIN], -1).double()
        total += x.sum(0)
        rows += x.shape[0]
    weights = load_file(str(dst / "model.safetensors"))
    weights["mask_hidden"] = (total / rows).float().view(1, 1, -1).contiguous()
    save_file(weights, str(dst / "model.safetensors"), metadata={"format": "pt"})
    cfg = json.loads((dst / "config.json").read_text())
    cfg["speculators_model_type"] = "peagle"
    cfg["architectures"] = ["PEagleSpeculator"]
    cfg["mask_token_id"] = MASK_TOKEN_ID
    cfg["speculators_config"]["algorithm"] = "peagle"
    cfg["speculators_config"]["proposal_methods"][0]["speculative_tokens"] = K
    (dst / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    return dst


RUNS = os.environ.get("EAGLE_VLLM_RUNS")
if __name__ != "__main__":
    pytestmark = pytest.mark.skipif(
        not RUNS, reason="EAGLE_VLLM_RUNS unset: `bash .ci/vllm` runs the real vLLM"
    )


def _run(mode: str) -> dict:
    folder = Path(RUNS or "") / "peagle" / f"peagle-k{K}-{mode}"
    if not (folder / "figures.json").is_file():
        pytest.fail(f"{folder}: no figures.json (the vLLM stage did not serve the P-EAGLE draft)")
    return json.loads((folder / "figures.json").read_text())


@pytest.fixture(scope="module")
def ours(tmp_path_factory) -> dict:
    """The replay of `capture --generate 128` samples with the built P-EAGLE draft, k = 3."""
    _run("one")  # skip before the capture when vLLM did not serve it
    pytest.importorskip("transformers")
    from support import capture_generated

    from inspector.serving.replay import Replayer
    from inspector.serving.spec import DraftSpec
    from inspector.session import Inputs, load_evaluator
    from inspector.wiring import Wiring

    tmp = tmp_path_factory.mktemp("peagle")
    draft = build_peagle_draft(tmp / "draft")
    generated = capture_generated(tmp / "gen", MAX_TOKENS)
    ev = load_evaluator(
        Inputs(draft, [str(generated)], target=DEMO / "target"),
        device="cpu",
        dtype="float32",
        ttt_steps=K,
    )
    assert ev.draft.config.parallel is not None
    report = Replayer(ev, DraftSpec(K)).run([Wiring(TRAIN)])
    return report.wirings[0].to_dict()


@pytest.mark.parametrize("mode", ["one", "batch"])
def test_the_replay_gives_vllms_peagle_counts_exactly(mode, ours):
    vllm = _run(mode)
    served = json.loads(
        (Path(RUNS or "") / "peagle" / f"peagle-k{K}-{mode}" / "draft_config.json").read_text()
    )
    assert served["speculators_model_type"] == "peagle"
    assert served["mask_token_id"] == MASK_TOKEN_ID
    assert ours["rounds"] == vllm["num_drafts"]
    assert ours["accepted"] == vllm["num_accepted_tokens"]
    assert ours["accepted_per_pos"] == vllm["accepted_per_pos"]
    assert ours["accept_length"] == vllm["mean_acceptance_length"]
    assert not ours["accept_length_is_lower_bound"]
    for s in ours["per_sample"]:
        r = vllm["requests"][s["index"]]
        assert s["accepted"] == r["spec_decode_metrics"]["per_step_accepted"], s["index"]


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "--build":
        raise SystemExit("usage: python tests/engine/test_vllm_peagle.py --build DIR")
    print(build_peagle_draft(Path(sys.argv[2])))
