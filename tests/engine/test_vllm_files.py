"""The vLLM results folder (`.ci/run_vllm.py`, `.ci/vllm`) is whole and self-consistent.

These check vLLM's own files against each other: each run's counters (get_metrics), its log line,
its Prometheus text and its per-request metrics agree, and one-at-a-time and batched generation
gave the same. They run only with EAGLE_VLLM_RUNS=DIR (skipped otherwise); comparing vLLM with the
project's live loop is the parity tests' business, not this file's.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

RUNS = os.environ.get("EAGLE_VLLM_RUNS")
pytestmark = pytest.mark.skipif(not RUNS, reason="EAGLE_VLLM_RUNS not set (see .ci/vllm)")

FILES = ("figures.json", "requests.jsonl", "vllm.log", "metrics.prom", "draft_config.json")
SPEC_LINE = re.compile(
    r"SpecDecoding metrics: Mean acceptance length: (?P<mal>[\d.]+), "
    r"Accepted throughput: [\d.]+ tokens/s, Drafted throughput: [\d.]+ tokens/s, "
    r"Accepted: (?P<acc>\d+) tokens, Drafted: (?P<drafted>\d+) tokens, "
    r"Per-position acceptance rate: (?P<rates>[\d., ]+), "
    r"Avg Draft acceptance rate: (?P<rate>[\d.]+|nan)%"
)
AUX_LINE = re.compile(r"Using auxiliary layers from speculative config: \(([\d, ]*)\)")
PROM_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][\w:]*)(?:\{(?P<labels>[^}]*)\})? (?P<value>\S+)$")


def _manifest() -> dict:
    return json.loads((Path(RUNS) / "runs.json").read_text())


def _runs() -> list[dict]:
    if not RUNS:
        return []
    return _manifest()["runs"]


def _ids(runs: list[dict]) -> list[str]:
    return [r["name"] for r in runs]


RUN_LIST = _runs()


def _folder(run: dict) -> Path:
    return Path(RUNS) / run["name"]


def _figures(run: dict) -> dict:
    return json.loads((_folder(run) / "figures.json").read_text())


def _prom(run: dict) -> dict[str, dict[str, float]]:
    """name -> {labels text -> value} of the samples in metrics.prom."""
    out: dict[str, dict[str, float]] = {}
    for line in (_folder(run) / "metrics.prom").read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        m = PROM_SAMPLE.match(line)
        assert m, f"not a Prometheus sample line: {line!r}"
        out.setdefault(m["name"], {})[m["labels"] or ""] = float(m["value"])
    return out


def test_manifest_lists_every_run():
    man = _manifest()
    n = len(man["k"]) * len(man["drafts"]) * len(man["modes"])
    assert len(man["runs"]) == n
    assert {r["variant"] for r in man["runs"]} == set(man["drafts"])
    # what .ci/vllm's greedy stage runs: a later run written into the same folder (its own
    # runs.json) would leave these tests checking that run alone
    assert set(man["drafts"]) == {"train", "serve"} and man["k"] == [1, 3, 5]
    assert man["modes"] == ["one", "batch"] and len(RUN_LIST) == 12


@pytest.mark.parametrize("run", RUN_LIST, ids=_ids(RUN_LIST))
def test_run_folder_is_whole(run):
    for f in FILES:
        assert (_folder(run) / f).is_file(), f


@pytest.mark.parametrize("run", RUN_LIST, ids=_ids(RUN_LIST))
def test_counters_match_requests(run):
    fig = _figures(run)
    k = fig["k"]
    reqs = fig["requests"]
    prompts = (
        json.loads((Path(RUNS) / "prompts.json").read_text())["prompts"]
        if (Path(RUNS) / "prompts.json").is_file()
        else None
    )
    if prompts is not None:
        assert [r["prompt_token_ids"] for r in reqs] == prompts
    assert fig["mean_acceptance_length"] == pytest.approx(
        1 + fig["num_accepted_tokens"] / fig["num_drafts"]
    )
    assert len(fig["accepted_per_pos"]) == k
    assert sum(fig["accepted_per_pos"]) == fig["num_accepted_tokens"]
    sdm = [r["spec_decode_metrics"] for r in reqs]
    assert all(s is not None for s in sdm)
    assert sum(s["num_spec_steps"] for s in sdm) == fig["num_drafts"]
    assert sum(s["num_accepted_draft_tokens"] for s in sdm) == fig["num_accepted_tokens"]
    assert sum(s["num_draft_tokens"] for s in sdm) == fig["num_draft_tokens"]
    for s in sdm:
        assert s["num_spec_tokens"] == k
        assert len(s["per_step_accepted"]) == s["num_spec_steps"] == sum(s["acceptance_histogram"])
        assert sum(s["per_step_accepted"]) == s["num_accepted_draft_tokens"]
        assert sum(s["per_step_drafted"]) == s["num_draft_tokens"]
        assert s["mean_acceptance_length"] == pytest.approx(
            1 + s["num_accepted_draft_tokens"] / s["num_spec_steps"]
        )
    # per position: the requests' per-step counts, pooled
    per_pos = [sum(a > j for s in sdm for a in s["per_step_accepted"]) for j in range(k)]
    assert per_pos == fig["accepted_per_pos"]


@pytest.mark.parametrize("run", RUN_LIST, ids=_ids(RUN_LIST))
def test_requests_jsonl_is_figures_requests(run):
    lines = (_folder(run) / "requests.jsonl").read_text().splitlines()
    reqs = _figures(run)["requests"]
    assert len(lines) == len(reqs)
    for line, r in zip(lines, reqs, strict=True):
        obj = json.loads(line)
        assert set(obj) == {"prompt_token_ids", "output_token_ids", "spec_decode_metrics"}
        assert obj["prompt_token_ids"] == r["prompt_token_ids"]
        assert obj["output_token_ids"] == r["output_token_ids"]
        assert obj["spec_decode_metrics"] == r["spec_decode_metrics"]


@pytest.mark.parametrize("run", RUN_LIST, ids=_ids(RUN_LIST))
def test_log_line_matches_counters(run):
    fig = _figures(run)
    text = (_folder(run) / "vllm.log").read_text()
    lines = [m for m in SPEC_LINE.finditer(text)]
    assert len(lines) == 1, "one SpecDecoding metrics line per run"
    m = lines[0]
    assert int(m["acc"]) == fig["num_accepted_tokens"]
    assert int(m["drafted"]) == fig["num_draft_tokens"]
    assert m["mal"] == f"{fig['mean_acceptance_length']:.2f}"
    rates = [float(x) for x in m["rates"].split(",")]
    assert rates == [round(a / fig["num_drafts"], 3) for a in fig["accepted_per_pos"]]
    aux = AUX_LINE.findall(text)
    assert aux, "the log names the auxiliary layers"
    ids = [int(x) for x in aux[-1].split(",") if x.strip()]
    assert (
        ids
        == json.loads((_folder(run) / "draft_config.json").read_text())[
            "eagle_aux_hidden_state_layer_ids"
        ]
        == run["aux_ids"]
    )


@pytest.mark.parametrize("run", RUN_LIST, ids=_ids(RUN_LIST))
def test_prometheus_matches_counters(run):
    fig = _figures(run)
    prom = _prom(run)

    def total(name):
        assert name in prom, name
        return sum(prom[name].values())

    assert total("vllm:spec_decode_num_drafts_total") == fig["num_drafts"]
    assert total("vllm:spec_decode_num_draft_tokens_total") == fig["num_draft_tokens"]
    assert total("vllm:spec_decode_num_accepted_tokens_total") == fig["num_accepted_tokens"]
    pos = prom["vllm:spec_decode_num_accepted_tokens_per_pos_total"]
    by_pos = {int(re.search(r'position="(\d+)"', lbl)[1]): v for lbl, v in pos.items()}
    assert [by_pos[j] for j in range(fig["k"])] == fig["accepted_per_pos"]


def _pairs():
    by = {(r["variant"], r["k"], r["mode"]): r for r in RUN_LIST}
    return [
        (by[(v, k, "one")], by[(v, k, "batch")])
        for (v, k, mode) in by
        if mode == "one" and (v, k, "batch") in by
    ]


PAIRS = _pairs()


@pytest.mark.parametrize("one,batch", PAIRS, ids=[f"{a['variant']}-k{a['k']}" for a, _ in PAIRS])
def test_one_at_a_time_equals_batch(one, batch):
    a, b = _figures(one), _figures(batch)
    for key in ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "accepted_per_pos"):
        assert a[key] == b[key], key
    for ra, rb in zip(a["requests"], b["requests"], strict=True):
        assert ra["output_token_ids"] == rb["output_token_ids"]
        assert ra["spec_decode_metrics"] == rb["spec_decode_metrics"]


def test_greedy_outputs_do_not_depend_on_the_draft():
    """Greedy (float32): what vLLM generates is the target's own continuation, whatever the
    draft variant, k or mode; only the acceptance figures differ."""
    outs = {r["name"]: [q["output_token_ids"] for q in _figures(r)["requests"]] for r in RUN_LIST}
    first = next(iter(outs.values()))
    assert all(o == first for o in outs.values()), [n for n, o in outs.items() if o != first]
