"""The real vLLM serving the demo's DFlash block draft against our block replay, round for round.

vLLM's CPU build 0.32.0 serves a z-lab DFlash draft with `speculative_config={"method": "dflash",
"model": DRAFT, "num_speculative_tokens": 3}`: each round runs the anchor and 3 masks, the
draft's block size 4, its attention non-causal (the CPU attention backend takes it). `.ci/vllm`
runs it (step 3f):

    python tests/engine/test_vllm_block.py --build "$out/block/drafts"
    "$venv/bin/python" .ci/run_vllm.py --method dflash --target assets/demo/target \
        --draft trained="$out/block/drafts/demo/draft" --draft tied="$out/block/drafts/tied" \
        --prompts "$out/prompts.json" --k 3 --max-tokens 128 --dtype float32 --out "$out/block"

`--build` writes the demo's block case (`inspector.demo.block_draft.build_block_demo`: the draft
trained on ids [0, 3, 5], HF [1, 4, 6]) and `tied`, the same weights with every layer's
`k_norm` set to layer 0's.

The CPU build computes one thing differently from the reference: it norms the context keys of
every draft layer with layer 0's k_norm. `qwen3_dflash.py` stacks the layers' k_norm weights
[L, head_dim] and norms the context keys [L, ctx, kv heads, head_dim] with one `ops.rms_norm`
call (`_normalize_context_k`, lines 639-648); the CPU kernel (csrc/cpu/layernorm.cpp,
`rms_norm_impl`) reads the first head_dim weights for every row. On `tied` that is what the
weights say anyway, so vLLM runs the draft exactly; on the trained draft it runs another one.

Here the served requests' tokens (prompt + output, loss mask on the output) become samples
through our `capture` (every layer, float32), and `accept --engine vllm --steps 3` on them:

- on `tied`, every request's rounds (`per_sample[].accepted_vllm`) are vLLM's
  `per_step_accepted`, and the pooled counts its num_drafts, num_accepted_tokens and accepted
  tokens per position, one at a time and batched;
- on the trained draft, ours (the draft as trained) differ from vLLM's, and with the fault
  modelled (the context keys normed by layer 0's k_norm) every request is vLLM's again;
- the block live loop (`accept --live`) over the same prompts generates vLLM's tokens and, on
  `tied`, gives every request's `per_step_accepted` and the pooled counts; on the trained draft
  it gives them with the fault modelled;
- `reconcile` reads vLLM's per-request dump (`requests.jsonl`): on `tied` the draft is served as
  configured, every request equal round for round; on the trained draft vLLM accepts less than
  the draft as trained, and the verdict names the engine's fault and this known cause.

Without EAGLE_VLLM_RUNS these tests skip; with it, a missing block run fails.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "assets" / "demo"
K = 3  # the draft's block size 4: the anchor and 3 masks a round
MODES = ("one", "batch")
LAYERS = "0,1,2,3,4,5,6"  # every layer of the 6-layer demo target (HF indices)


def build_block_drafts(dst: Path) -> dict[str, Path]:
    """The demo's block draft (`dst/demo`, as `python -m inspector.demo block` writes it) and
    `dst/tied`: the same weights with every layer's self_attn.k_norm set to layer 0's."""
    from safetensors.torch import load_file, save_file

    from inspector.demo.block_draft import build_block_demo

    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    demo = build_block_demo(dst / "demo", DEMO, log=lambda line: print(line, file=sys.stderr))
    tied = dst / "tied"
    shutil.copytree(demo["draft"], tied)
    weights = load_file(str(tied / "model.safetensors"))
    k0 = weights["layers.0.self_attn.k_norm.weight"]
    layers = json.loads((tied / "config.json").read_text())["num_hidden_layers"]
    for i in range(1, layers):
        weights[f"layers.{i}.self_attn.k_norm.weight"] = k0.clone()
    save_file(weights, str(tied / "model.safetensors"), metadata={"format": "pt"})
    return {"trained": demo["draft"], "tied": tied}


RUNS = os.environ.get("EAGLE_VLLM_RUNS")
if __name__ != "__main__":
    pytestmark = pytest.mark.skipif(
        not RUNS, reason="EAGLE_VLLM_RUNS unset: `bash .ci/vllm` runs the real vLLM"
    )


def _folder(variant: str, mode: str) -> Path:
    return Path(RUNS or "") / "block" / f"{variant}-k{K}-{mode}"


def _run(variant: str, mode: str) -> dict:
    folder = _folder(variant, mode)
    if not (folder / "figures.json").is_file():
        pytest.fail(f"{folder}: no figures.json (the vLLM stage did not serve the block draft)")
    return json.loads((folder / "figures.json").read_text())


def _draft(variant: str) -> Path:
    drafts = Path(RUNS or "") / "block" / "drafts"
    return drafts / "demo" / "draft" if variant == "trained" else drafts / variant


def _tokens(request: dict) -> tuple[int, ...]:
    return tuple(request["prompt_token_ids"] + request["output_token_ids"])


@pytest.fixture(scope="module")
def samples(tmp_path_factory) -> Path:
    """vLLM's requests (the trained draft, one at a time) as samples: `capture` of prompt +
    output, the loss mask on the output, every layer, float32."""
    pytest.importorskip("transformers")
    from inspector.cli import main

    tmp = tmp_path_factory.mktemp("block")
    lines = []
    for r in _run("trained", "one")["requests"]:
        p, o = r["prompt_token_ids"], r["output_token_ids"]
        lines.append(json.dumps({"input_ids": p + o, "loss_mask": [0] * len(p) + [1] * len(o)}))
    (tmp / "requests.jsonl").write_text("\n".join(lines) + "\n")
    out = tmp / "samples"
    argv = ["capture", str(DEMO / "target"), str(tmp / "requests.jsonl"), "--out", str(out)]
    argv += ["--layers", LAYERS, "--save-dtype", "float32", "--device", "cpu"]
    assert main(argv) == 0
    return out


def _accept(capsys, variant: str, samples: Path) -> dict:
    """`accept DRAFT SAMPLES --engine vllm --steps 3 --wiring train --json`: the configured
    wiring's row."""
    from inspector.cli import main

    argv = ["accept", str(_draft(variant)), str(samples), "--target", str(DEMO / "target")]
    argv += ["--engine", "vllm", "--steps", str(K), "--wiring", "train", "--json"]
    capsys.readouterr()
    assert main([*argv, "--device", "cpu", "--dtype", "float32"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["wirings"]
    assert row["layers"] == [1, 4, 6]  # ids [0, 3, 5] + 1, what vLLM captures
    return row


def _per_request(row: dict, vllm: dict, samples: Path) -> list[tuple[list[int], list[int]]]:
    """(ours, vLLM's) rounds of each request, paired by the request's tokens."""
    import torch

    by_tokens = {_tokens(r): r for r in vllm["requests"]}
    pairs = []
    for s in row["per_sample"]:
        ids = torch.load(s["path"], weights_only=True)["input_ids"].tolist()
        r = by_tokens.get(tuple(ids))
        assert r is not None, f"sample {s['sample']}: vLLM generated other tokens"
        pairs.append((s["accepted_vllm"], r["spec_decode_metrics"]["per_step_accepted"]))
    assert len(pairs) == len(vllm["requests"]) == 8
    return pairs


def _assert_equal(row: dict, vllm: dict, samples: Path) -> None:
    pairs = _per_request(row, vllm, samples)
    for i, (ours, theirs) in enumerate(pairs):
        assert ours == theirs, f"request {i}"
    pooled = row["accept_length"]["vllm"]
    assert pooled["rounds"] == vllm["num_drafts"]
    assert pooled["accepted"] == vllm["num_accepted_tokens"]
    rounds = [a for ours, _ in pairs for a in ours]
    per_pos = [sum(a > k for a in rounds) for k in range(K)]
    assert per_pos == vllm["accepted_per_pos"]
    assert pooled["value"] == vllm["mean_acceptance_length"]


def test_vllm_generated_the_same_tokens_for_both_drafts():
    """Greedy speculative decoding is lossless: the target's tokens, whichever draft."""
    want = [_tokens(r) for r in _run("trained", "one")["requests"]]
    for variant in ("trained", "tied"):
        for mode in MODES:
            assert [_tokens(r) for r in _run(variant, mode)["requests"]] == want, (variant, mode)
    served = json.loads((_folder("trained", "one") / "draft_config.json").read_text())
    assert served["dflash_config"]["target_layer_ids"] == [0, 3, 5]
    assert served["dflash_config"]["block_size"] == K + 1


@pytest.mark.parametrize("mode", MODES)
def test_the_block_replay_gives_vllms_counts_exactly(mode, samples, capsys):
    """`tied`: vLLM's CPU build runs the draft the weights make; every round of every request
    is ours."""
    _assert_equal(_accept(capsys, "tied", samples), _run("tied", mode), samples)


def _live(variant: str, tmp_path: Path) -> tuple[dict, Path]:
    """The block live loop (`accept DRAFT --live`) on `variant` over the prompts vLLM served
    ($out/prompts.json: the same ids), 128 tokens, k = 3, float32: its report's wiring entry and
    the folder of the sequences it generated."""
    import torch

    from inspector.formats import load_block_draft
    from inspector.serving.live import LiveSettings, live_accept
    from inspector.serving.spec import DraftSpec

    served = json.loads((Path(RUNS or "") / "prompts.json").read_text())["prompts"]
    tmp_path.mkdir(parents=True, exist_ok=True)
    prompts = tmp_path / "prompts.jsonl"  # all prompt: the live loop generates from each line
    prompts.write_text("".join(json.dumps({"input_ids": p}) + "\n" for p in served))
    draft = load_block_draft(
        str(_draft(variant)), target=str(DEMO / "target"), dtype="float32", device="cpu"
    )
    torch.set_num_threads(1)
    out = tmp_path / f"live-{variant}"
    live = LiveSettings(
        spec=DraftSpec(K), max_new=128, wirings=["train"], target_dtype="float32", out=out
    )
    report = live_accept(draft, DEMO / "target", prompts, live)
    (wa,) = report.wirings
    ours = wa.to_dict()
    assert ours["label"] == "train [L1, L4, L6]"
    assert not ours["accept_length_is_lower_bound"]
    return ours, out / "train"


def _live_pairs(ours: dict, folder: Path, vllm: dict) -> list[tuple[list[int], list[int]]]:
    """(ours, vLLM's) rounds of each request, paired by the tokens the loop generated: every
    one of them is a request vLLM served."""
    import torch

    by_tokens = {_tokens(r): r for r in vllm["requests"]}
    assert len(ours["per_sample"]) == len(vllm["requests"]) == 8
    pairs = []
    for s in ours["per_sample"]:
        data = torch.load(folder / f"data_{s['index']}.pt", weights_only=True)
        r = by_tokens.get(tuple(data["input_ids"].tolist()))
        assert r is not None, f"request {s['index']}: vLLM generated other tokens"
        pairs.append((s["accepted"], r["spec_decode_metrics"]["per_step_accepted"]))
    return pairs


def _assert_live_equal(ours: dict, folder: Path, vllm: dict) -> None:
    for i, (mine, theirs) in enumerate(_live_pairs(ours, folder, vllm)):
        assert mine == theirs, f"request {i}"
    assert ours["rounds"] == vllm["num_drafts"]
    assert ours["accepted"] == vllm["num_accepted_tokens"]
    assert ours["accepted_per_pos"] == vllm["accepted_per_pos"]
    assert ours["accept_length"] == vllm["mean_acceptance_length"]


def test_the_live_loop_gives_vllms_counts_and_tokens(tmp_path):
    """`tied`: the live loop generates vLLM's tokens and gives every request's
    per_step_accepted and the pooled counts (num_drafts, num_accepted_tokens, accepted tokens
    per position), one at a time and batched."""
    ours, folder = _live("tied", tmp_path)
    for mode in MODES:
        _assert_live_equal(ours, folder, _run("tied", mode))


def test_the_live_loop_on_the_trained_draft_meets_vllms_k_norm_fault(tmp_path, monkeypatch):
    """The trained draft: the live loop (the draft as trained) departs from vLLM's counts on
    some request, and with the CPU build's fault modelled (the context keys normed by layer 0's
    k_norm, in the one block forward the loop shares with the replay) it gives them all."""
    from safetensors.torch import load_file

    vllm = _run("trained", "one")
    ours, folder = _live("trained", tmp_path)
    pairs = _live_pairs(ours, folder, vllm)
    assert any(mine != theirs for mine, theirs in pairs), "vLLM ran the draft as trained"
    k0 = load_file(str(_draft("trained") / "model.safetensors"))["layers.0.self_attn.k_norm.weight"]
    _context_keys_normed_by_layer_0(monkeypatch, k0)
    modelled, folder = _live("trained", tmp_path / "modelled")
    for mode in MODES:
        _assert_live_equal(modelled, folder, _run("trained", mode))


def _context_keys_normed_by_layer_0(monkeypatch, k0) -> None:
    """vLLM 0.32's CPU build, modelled: in every layer the context keys are normed by layer 0's
    k_norm (the block rows' keys by the layer's own). `model.block._attention` projects the
    context's keys first ([1, T, .], the rows every block shares), then the block's."""
    import inspector.model.block as block

    real_attention, real_kv_heads = block._attention, block.kv_heads

    def attention(cfg, attn, a, ctx, *rest):
        first = [True]

        def kv_heads(cfg_, attn_, k, v):
            if first[0]:
                first[0] = False
                assert k.shape[:-1] == ctx.shape[:-1]  # the context's rows
                attn_ = dataclasses.replace(attn_, k_norm=k0)
            return real_kv_heads(cfg_, attn_, k, v)

        monkeypatch.setattr(block, "kv_heads", kv_heads)
        try:
            return real_attention(cfg, attn, a, ctx, *rest)
        finally:
            monkeypatch.setattr(block, "kv_heads", real_kv_heads)

    monkeypatch.setattr(block, "_attention", attention)


def test_vllm_cpu_norms_the_context_keys_with_layer_0s_k_norm(samples, capsys, monkeypatch):
    """The trained draft: ours differ from vLLM's (its CPU build runs another draft), and with
    that fault modelled every request is vLLM's, one at a time and batched."""
    from safetensors.torch import load_file

    trained = _accept(capsys, "trained", samples)
    vllm = _run("trained", "one")
    pairs = _per_request(trained, vllm, samples)
    differ = [i for i, (ours, theirs) in enumerate(pairs) if ours != theirs]
    pooled = trained["accept_length"]["vllm"]
    with capsys.disabled():
        print(
            f"\nblock draft as trained: ours {pooled['rounds']} rounds / {pooled['accepted']} "
            f"accepted, vLLM {vllm['num_drafts']} / {vllm['num_accepted_tokens']}; requests "
            f"that differ: {differ}"
        )
    assert differ, "vLLM ran the draft as trained: its CPU build's k_norm fault is gone"
    k0 = load_file(str(_draft("trained") / "model.safetensors"))["layers.0.self_attn.k_norm.weight"]
    _context_keys_normed_by_layer_0(monkeypatch, k0)
    modelled = _accept(capsys, "trained", samples)
    for mode in MODES:
        _assert_equal(modelled, _run("trained", mode), samples)


def _reconcile(capsys, variant: str, samples: Path) -> dict:
    from inspector.cli import main

    log = _folder(variant, "batch") / "requests.jsonl"
    argv = ["reconcile", str(_draft(variant)), str(samples), "--engine-log", str(log)]
    argv += ["--target", str(DEMO / "target"), "--steps", str(K), "--json"]
    capsys.readouterr()
    code = main([*argv, "--device", "cpu", "--dtype", "float32"])
    doc = json.loads(capsys.readouterr().out)
    assert code == (0 if doc["verdict"] == "as_is" else 1), doc["summary"]
    return doc


def test_reconcile_reads_vllms_block_requests(samples, capsys):
    """The block reconcile on the real engine's dump: `tied` is served as configured, request
    for request; the trained draft is below every wiring's replay, an engine fault, with the
    CPU build's k_norm fault named."""
    tied = _reconcile(capsys, "tied", samples)
    assert tied["verdict"] == "as_is", tied["summary"]
    assert tied["requests_matched"] == 8
    assert tied["wirings"][0]["layers"] == [1, 4, 6]
    assert tied["wirings"][0]["requests_equal"] == 8
    trained = _reconcile(capsys, "trained", samples)
    with capsys.disabled():
        print(f"\nreconcile of the trained block draft: {trained['summary']}")
    assert trained["verdict"] == "engine_fault", trained["summary"]
    assert "known fault of vLLM in computing block drafts" in trained["summary"]
    assert any("k_norm" in n for n in trained["notes"])
    assert trained["wirings"][0]["requests_equal"] < 8


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "--build":
        raise SystemExit("usage: python tests/engine/test_vllm_block.py --build DIR")
    for name, path in build_block_drafts(Path(sys.argv[2])).items():
        print(f"{name}: {path}")
