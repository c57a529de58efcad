"""reconcile: an engine's figures held against the replay of the same requests. Logs written in
the engines' own formats (the format strings of vLLM's metrics.py and SGLang's reporter); the
real engine's own files are checked in tests/engine (the vLLM CI stage)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import error_lines

pytest.importorskip("transformers")

from support import capture_generated, reconcile_json, vllm_line  # noqa: E402

from inspector.cli import main  # noqa: E402
from inspector.commands.exit_codes import for_verdict  # noqa: E402

DEMO = Path(__file__).resolve().parent.parent / "assets" / "demo"


@pytest.fixture(scope="module")
def replayed(generated) -> dict:
    """`accept --steps 3 --json` over the generated requests (train and serve wirings)."""
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["accept", str(DEMO / "draft"), str(generated), "--json", "--device", "cpu"])
    assert rc == 0
    return json.loads(buf.getvalue())


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    """The demo's prompts continued by its target (greedy, 40 tokens, float32 slots), with the
    continuation past each stop: the requests an engine would serve."""
    return capture_generated(tmp_path_factory.mktemp("gen") / "gen", 40)


def _accept(capsys, samples: Path, *extra: str) -> dict:
    capsys.readouterr()
    rc = main(["accept", str(DEMO / "draft"), str(samples), "--json", "--device", "cpu", *extra])
    assert rc == 0
    return json.loads(capsys.readouterr().out)


def _reconcile(capsys, samples: Path, log: Path, *extra: str) -> dict:
    return reconcile_json(capsys, samples, log, *extra)


def _vllm_line(w: dict, k: int) -> str:
    return vllm_line(w, k)


def test_the_continuation_makes_the_count_exact(capsys, generated, replayed):
    doc = replayed
    for w in doc["wirings"]:
        assert not w["accept_length_is_lower_bound"] and w["lower_bound_requests"] == 0
        assert w["accept_length"] == pytest.approx(1 + w["accepted"] / w["rounds"])
    # without it, the last rounds that reached the stop are lower bounds
    import torch

    cut = generated.parent / "cut"
    cut.mkdir()
    for f in sorted(generated.glob("data_*.pt")):
        d = torch.load(f, weights_only=True)
        torch.save({k: d[k] for k in ("input_ids", "hidden_states", "loss_mask")}, cut / f.name)
    (cut / "data_config.json").write_text((generated / "data_config.json").read_text())
    low = _accept(capsys, cut, "--steps", "3")
    for w, lw in zip(doc["wirings"], low["wirings"], strict=True):
        assert lw["rounds"] == w["rounds"] and lw["emitted"] == w["emitted"]
        assert lw["accepted"] <= w["accepted"]
        if lw["accepted"] < w["accepted"]:
            assert lw["accept_length_is_lower_bound"] and lw["lower_bound_requests"] > 0
    assert any(
        lw["accepted"] < w["accepted"] for w, lw in zip(doc["wirings"], low["wirings"], strict=True)
    )


def test_a_log_of_the_configured_wiring_is_the_draft_as_it_is(
    capsys, generated, replayed, tmp_path
):
    doc = replayed
    train, serve = doc["wirings"]
    log = tmp_path / "vllm.log"
    log.write_text("INFO other\n" + _vllm_line(train, 3) + "\n")
    r = _reconcile(capsys, generated, log)
    assert r["verdict"] == "as_is" and r["matched"].startswith("configured")
    assert "the draft is what it is" in r["summary"]
    assert r["fix"] is None and r["engine_log"]["rounds"] == train["rounds"]
    # the configured wiring first, then the wiring search's contenders and the presets
    assert [w["equal"] for w in r["wirings"]] == [True] + [False] * (len(r["wirings"]) - 1)
    assert r["wirings_named"] == {
        "trained": r["matched"],
        "configured": r["matched"],
        "fed": r["matched"],
    }


def test_a_log_of_another_wiring_names_the_wrong_layers_and_the_fix(
    capsys, generated, replayed, tmp_path
):
    doc = replayed
    train, serve = doc["wirings"]
    prom = tmp_path / "metrics.prom"
    lines = [
        "# TYPE vllm:spec_decode_num_drafts_total counter",
        f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="t"}} {serve["rounds"]}.0',
        f'vllm:spec_decode_num_draft_tokens_total{{engine="0"}} {serve["rounds"] * 3}.0',
        f'vllm:spec_decode_num_accepted_tokens_total{{engine="0"}} {serve["accepted"]}.0',
    ]
    lines += [
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",position="{i}"}} {c}.0'
        for i, c in enumerate(serve["accepted_per_pos"])
    ]
    prom.write_text("\n".join(lines) + "\n")
    r = _reconcile(capsys, generated, prom)
    assert r["verdict"] == "wrong_wiring"
    assert r["matched"].startswith("serve") and r["best"].startswith("configured")
    assert "your engine feeds the wrong layers" in r["summary"]
    assert "exactly what this draft gives fed [L2, L4, L6]" in r["summary"]
    assert f"which gives {train['accept_length']:.2f}, what its config names" in r["summary"]
    assert "eagle_aux_hidden_state_layer_ids [0, 2, 4] for vLLM" in r["fix"]
    assert r["serving_config"]["vllm"]["config"] == {"eagle_aux_hidden_state_layer_ids": [0, 2, 4]}


def deployed_copy(folder: Path, ids: list[int]) -> Path:
    """The demo draft as deployed with a config naming `ids` (the weights untouched)."""
    import shutil

    shutil.copytree(DEMO / "draft", folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["eagle_aux_hidden_state_layer_ids"] = ids
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def test_a_config_naming_the_serving_ids_is_not_trusted(capsys, generated, replayed, tmp_path):
    """The incident itself: the weights trained on [embed, L2, L4], the config rewritten to name
    [2, 4, 6], and the engine faithfully fed what the config names. The verdict must come from
    the weights (the wiring search), not from the config: trained, configured and fed named,
    and the fix the trained wiring's ids."""
    _, serve = replayed["wirings"]
    deployed = deployed_copy(tmp_path / "deployed", [2, 4, 6])
    log = tmp_path / "vllm.log"
    log.write_text(_vllm_line(serve, 3) + "\n")
    r = reconcile_json_of(capsys, deployed, generated, log)
    assert r["verdict"] == "wrong_wiring", r["summary"]
    named = r["wirings_named"]
    assert named["configured"] == "configured [L2, L4, L6]" == named["fed"]
    assert named["trained"].endswith("[embed, L2, L4]")
    assert "exactly what this draft gives fed [L2, L4, L6]" in r["summary"]
    assert "the weights were trained on [embed, L2, L4]" in r["summary"]
    assert "the ones its config names" in r["summary"]
    assert "eagle_aux_hidden_state_layer_ids [0, 2, 4] for vLLM" in r["fix"]
    search = r["trained_search"]
    assert search["configured_label"] == "[L2, L4, L6]"
    assert search["clearly_better_than_configured"] is True
    assert search["all_tok"]["acc"] > search["configured_all_tok"]["acc"] + 0.2
    # the presets never repeat a layer (the deployed config's L6 is also the verifier's slot)
    for w in r["wirings"]:
        assert len(set(w["wiring"])) == len(w["wiring"])
    # the same log against the shipped config: the engine feeds what the config does not name
    shipped = reconcile_json_of(capsys, DEMO / "draft", generated, log)
    assert shipped["verdict"] == "wrong_wiring"
    assert shipped["wirings_named"]["configured"] == shipped["wirings_named"]["trained"]


def test_a_config_naming_the_serving_ids_is_found_from_prompts_alone(capsys, replayed, tmp_path):
    """`--prompts` captures every layer the search needs, whatever the config names: the
    embedding slot the deployed config leaves out is searched too."""
    _, serve = replayed["wirings"]
    deployed = deployed_copy(tmp_path / "deployed", [2, 4, 6])
    log = tmp_path / "vllm.log"
    log.write_text(_vllm_line(serve, 3) + "\n")
    capsys.readouterr()
    argv = ["reconcile", str(deployed), "--prompts", str(DEMO / "prompts.jsonl")]
    argv += ["--target", str(DEMO / "target"), "--engine-log", str(log), "--json"]
    argv += ["--device", "cpu", "--dtype", "float32", "--max-new", "40"]
    assert main(argv) == 1  # a problem found
    r = json.loads(capsys.readouterr().out)
    assert r["verdict"] == "wrong_wiring", r["summary"]
    assert r["wirings_named"]["fed"] == "configured [L2, L4, L6]"
    # 40 tokens of 8 prompts: the trained [embed, L2, L4] is named, alone where the evidence
    # settles it, else among the neighbours it cannot tell apart, each named in the fix
    settled = r["settlement"]
    named = [settled["wiring"], *settled["indistinct"]]
    by_slots = {tuple(w["wiring"]): w["label"] for w in r["wirings"]}
    assert any(by_slots[tuple(w)].endswith("[embed, L2, L4]") for w in named), settled
    if settled["ambiguous"]:
        assert "cannot settle the trained wiring among" in r["fix"]
        assert "[0, 2, 4]" in r["fix"], r["fix"]
    else:
        assert r["wirings_named"]["trained"].endswith("[embed, L2, L4]")
        assert "eagle_aux_hidden_state_layer_ids [0, 2, 4] for vLLM" in r["fix"]
    fed = next(w for w in r["wirings"] if w["label"] == "configured [L2, L4, L6]")
    assert (fed["rounds"], fed["accepted"]) == (serve["rounds"], serve["accepted"])
    # every layer of the 6-layer target was captured and searched
    labels = {w["label"].split(" ", 1)[1] for w in r["wirings"]}
    assert any("L5" in x or "L3" in x or "L1" in x for x in labels)


def reconcile_json_of(capsys, draft: Path, samples: Path, log: Path) -> dict:
    capsys.readouterr()
    argv = ["reconcile", str(draft), str(samples), "--engine-log", str(log), "--json"]
    rc = main([*argv, "--device", "cpu"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == for_verdict(doc["verdict"])
    return doc


def test_per_request_counts_pair_by_tokens_and_name_the_first_shortfall(
    capsys, generated, replayed, tmp_path
):
    import torch

    doc = replayed
    train = doc["wirings"][0]
    rows = []
    for s in train["per_sample"]:
        d = torch.load(s["path"], weights_only=True)
        ids, mask = d["input_ids"].tolist(), d["loss_mask"].tolist()
        p = mask.index(1)
        rows.append(
            {
                "prompt_token_ids": ids[:p],
                "output_token_ids": ids[p:],
                "spec_decode_metrics": {"per_step_accepted": list(s["accepted"])},
            }
        )
    f = tmp_path / "requests.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in reversed(rows)) + "\n")  # order is no key
    r = _reconcile(capsys, generated, f)
    assert r["verdict"] == "as_is" and r["requests_matched"] == len(rows)
    assert r["wirings"][0]["requests_equal"] == len(rows)
    # The engine accepts nothing but in request 3: below every wiring -> an engine-side fault,
    # and the first shortfall (in the log's order) is named.
    bad = [
        {
            **row,
            "spec_decode_metrics": {
                "per_step_accepted": [0] * len(row["spec_decode_metrics"]["per_step_accepted"])
            },
        }
        if i != 3
        else row
        for i, row in enumerate(rows)
    ]
    f.write_text("\n".join(json.dumps(r) for r in bad) + "\n")
    r = _reconcile(capsys, generated, f)
    assert r["verdict"] == "engine_fault", r["summary"]
    gap = r["first_gap"]
    first = next(
        (i, k)
        for i, row in enumerate(rows)
        for k, a in enumerate(row["spec_decode_metrics"]["per_step_accepted"])
        if a > 0 and i != 3
    )
    assert (gap["sample"], gap["round"]) == first
    assert gap["engine_accepted"] == 0 and gap["replay_accepted"] > 0
    assert gap["request"] == f"{f.name}:{first[0] + 1}"
    assert "an engine-side fault" in r["summary"] and r["engine_fault_classes"]


def test_malformed_logs_get_one_line_naming_the_file_and_line(capsys, generated, tmp_path):
    f = tmp_path / "cut.log"
    f.write_text("INFO x\nINFO SpecDecoding metrics: Mean acceptance length: 2.06, Accep\n")
    rc = main(["reconcile", str(DEMO / "draft"), str(generated), "--engine-log", str(f)])
    err = capsys.readouterr().err
    assert rc == 2 and len(error_lines(err)) == 1
    assert str(f) in err and "line 2" in err and "truncated" in err
    f.write_text(
        _vllm_line(
            {"accept_length": 2.0, "accepted": 10, "rounds": 10, "accepted_per_pos": [5, 3]}, 2
        )
    )
    rc = main(
        ["reconcile", str(DEMO / "draft"), str(generated), "--engine-log", str(f), "--steps", "3"]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "the engine drafted 2 tokens a round, --steps says 3" in err
