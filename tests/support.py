"""Small helpers several test modules share (imported as `support`, like `hostile`)."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from safetensors.torch import load_file, save_file

ROOT = Path(__file__).resolve().parents[1]


def edited_copy(
    src: Path,
    dst: Path,
    *,
    tensors: Callable[[dict], dict] | None = None,
    config: Callable[[dict], None] | None = None,
) -> Path:
    """A copy of a draft folder: `tensors(weights)` returns tensors to add or replace,
    `config(cfg)` edits the config in place."""
    shutil.copytree(src, dst)
    if tensors is not None:
        w = load_file(str(dst / "model.safetensors"))
        w.update(tensors(w))
        save_file(w, str(dst / "model.safetensors"))
    if config is not None:
        cfg = json.loads((dst / "config.json").read_text())
        config(cfg)
        (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def python_output(code: str) -> subprocess.CompletedProcess:
    """`code` run by a fresh interpreter on this checkout (what a module imports at load)."""
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


# The error model for float results compared against stored ones that another code computed (a
# peer trainer, our demo builder, a newer release of a library). Two float32 codes that add in
# different orders differ like a random walk of roundings: per reduction of n terms, about
# eps32 * sqrt(n) times the size of the terms, which the tensor's RMS measures (an element near zero
# is still a sum of terms of the tensor's size, so a relative tolerance alone fails there). Measured:
# the demo target's forward in float32 against float64 errs by at most 3.3 * eps32 * sqrt(128) * rms
# (hidden states, 6 layers); our draft's logits against speculators' and SpecForge's own differ by at
# most 3.2 * eps32 * sqrt(64) * rms (3 TTT steps). Two float32 orders can be twice one order's error
# apart; C_ACCUMULATION = 16 leaves a factor of 2.4 over the worst measured.
EPS32 = 2.0**-23
C_ACCUMULATION = 16


def accumulation_tolerance(ref, n: int) -> float:
    """The float32 accumulation allowance for results like `ref` (a tensor) that sum n terms."""
    return C_ACCUMULATION * EPS32 * math.sqrt(n) * float(ref.double().pow(2).mean().sqrt())


def capture_generated(out: Path, generate: int) -> Path:
    """`capture --generate N --save-dtype float32` of the demo prompts into `out`: the requests
    an engine would serve, with the target's continuation past each stop."""
    from inspector.cli import main

    demo = ROOT / "assets" / "demo"
    argv = ["capture", str(demo / "target"), str(demo / "prompts.jsonl"), "--out", str(out)]
    argv += ["--generate", str(generate), "--save-dtype", "float32"]
    argv += ["--draft", str(demo / "draft"), "--device", "cpu"]
    assert main(argv) == 0
    return out


def reconcile_json(capsys, samples: Path, log: Path, *extra: str) -> dict:
    """`eagle-inspect reconcile` of the demo draft on `samples` against `log`, as JSON."""
    from inspector.cli import main
    from inspector.commands.exit_codes import for_verdict

    capsys.readouterr()
    argv = ["reconcile", str(ROOT / "assets" / "demo" / "draft"), str(samples)]
    rc = main([*argv, "--engine-log", str(log), "--json", "--device", "cpu", *extra])
    doc = json.loads(capsys.readouterr().out)
    assert rc == for_verdict(doc["verdict"]), (rc, doc["verdict"])  # 0 as is, 1 a problem
    return doc


def error_lines(err: str) -> list[str]:
    """An error's own lines: stderr without the line under it that says what the command needs
    (`inspector.commands.help_text.TRIAGE`)."""
    return [
        ln
        for ln in err.strip().splitlines()
        if not (ln.startswith("  ") and ln.endswith("flags and an example)"))
    ]


def engine_run_folder(runs: str | None, name: str, stage: str) -> Path:
    """An engine stage's results for one setting (`<runs>/<name>/requests.jsonl`); a test
    failure naming the stage where it did not run that setting."""
    import pytest

    folder = Path(runs or "") / name
    if not (folder / "requests.jsonl").is_file():
        pytest.fail(f"{folder}: no requests.jsonl (the {stage} stage did not run this setting)")
    return folder


def engine_requests(folder: Path) -> list[dict]:
    """The requests an engine stage kept, one JSON object per line."""
    lines = (folder / "requests.jsonl").read_text().splitlines()
    return [json.loads(x) for x in lines if x.strip()]


def first_differences(samples: Path, reqs: list[dict]) -> list[tuple[int, int]]:
    """(request, first differing output token) where the engine's greedy text is not the one
    `capture --generate` wrote into `samples` (request i is data_i.pt)."""
    import torch

    out = []
    for i, r in enumerate(reqs):
        ids = torch.load(samples / f"data_{i}.pt", weights_only=True)["input_ids"].tolist()
        ours = ids[len(r["prompt_token_ids"]) :]
        theirs = r["output_ids"]
        j = next((j for j, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b), None)
        if j is not None:
            out.append((i, j))
    return out


def llamacpp_counts(s) -> tuple[int, int, int]:
    """(rounds with a draft, accepted, drafted tokens) of one request's replay, as llama-server
    counts them (a round with no room drafts nothing and is not a draft)."""
    drafted = s.drafted if s.drafted is not None else [s.depth] * len(s.accepted)
    rounds = sum(1 for d in drafted if d > 0)
    return rounds, int(s.accepted.sum()), int(sum(drafted))


# vLLM's SpecDecoding log line, the format string of its metrics.py
VLLM_LINE = (
    "INFO 12-01 16:29:19 [metrics.py:120] SpecDecoding metrics: Mean acceptance length: "
    "{mean:.2f}, Accepted throughput: 54.57 tokens/s, Drafted throughput: 154.05 tokens/s, "
    "Accepted: {acc} tokens, Drafted: {drafted} tokens, Per-position acceptance rate: {rates}, "
    "Avg Draft acceptance rate: 35.4%"
)


def vllm_line(w: dict, k: int) -> str:
    """The line vLLM logs for a wiring `accept --json` replayed at k drafted tokens a round."""
    rates = ", ".join(f"{c / w['rounds']:.3f}" for c in w["accepted_per_pos"])
    return VLLM_LINE.format(
        mean=w["accept_length"], acc=w["accepted"], drafted=w["rounds"] * k, rates=rates
    )
