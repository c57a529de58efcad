"""`accept`, `compare` and `sweep` warn in one line when the draft's config names a wiring its
weights do not fit best (the doctor's step-0 wiring search on the first samples): a config
rewritten to name the serving ids is the bug this tool exists for, and nothing else errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from inspector.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")

WARNING = (
    "the draft's config names [L2, L4, L6] ({conf}), but the weights fit [embed, L2, L4] best "
    "({trained} step-0 all-tok on 8 samples)"
)


def deployed(demo, folder: Path, ids: list[int]) -> Path:
    shutil.copytree(demo.draft, folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["eagle_aux_hidden_state_layer_ids"] = ids
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


@pytest.fixture
def held(demo) -> Path:
    return demo.draft.parent / "samples" / "held"


def _expected(demo, held: Path, draft: Path) -> str:
    """The warning's figures from the search itself (on the same first 8 samples)."""
    from inspector.doctor.wiring.trained import find_trained_wiring, pct_of
    from inspector.session import Inputs, load_evaluator

    ev = load_evaluator(Inputs(draft, [str(held)], demo.target), device="cpu")
    t = find_trained_wiring(ev)
    assert t.wiring == (0, 1, 2) and t.configured == (1, 2, 3) and t.clearly
    return WARNING.format(conf=pct_of(t.configured_all_tok), trained=pct_of(t.all_tok))


def _run(capsys, *argv: str) -> str:
    capsys.readouterr()
    assert main([*argv, "--device", "cpu"]) == 0
    return capsys.readouterr().err


def test_accept_warns_when_the_config_is_not_the_trained_wiring(capsys, demo, held, tmp_path):
    bad = deployed(demo, tmp_path / "deployed", [2, 4, 6])
    line = _expected(demo, held, bad)
    err = _run(capsys, "accept", str(bad), str(held), "--limit", "2")
    assert line in " ".join(err.split())
    assert "an engine reading this config feeds the wrong layers" in " ".join(err.split())
    # the shipped config names the trained wiring: no warning
    err = _run(capsys, "accept", str(demo.draft), str(held), "--limit", "2")
    assert "config names" not in err


def test_compare_warns_for_the_side_whose_config_is_wrong(capsys, demo, held, tmp_path):
    bad = deployed(demo, tmp_path / "deployed", [2, 4, 6])
    line = _expected(demo, held, bad)
    err = " ".join(
        _run(capsys, "compare", str(demo.draft), str(bad), str(held), "--limit", "2").split()
    )
    assert err.count(line) == 1


def test_sweep_notes_each_checkpoint_whose_config_is_wrong(capsys, demo, held, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(demo.draft, run / "epoch_0_step_50")
    bad = deployed(demo, run / "epoch_1_step_100", [2, 4, 6])
    line = _expected(demo, held, bad)
    capsys.readouterr()
    argv = ["sweep", str(run), str(held), "--limit", "2", "--fresh", "--json"]
    assert main([*argv, "--device", "cpu"]) == 0
    out = capsys.readouterr()
    doc = json.loads(out.out)
    notes = {r["name"]: r["note"] for r in doc["checkpoints"]}
    assert notes["epoch_0_step_50"] is None
    assert line in notes["epoch_1_step_100"]


def test_the_layers_a_capture_needs_for_the_search():
    """All of a small target's layers; a large one's embedding and last layer, each configured
    id and its neighbours, and the default triples (vLLM/llama.cpp's and SpecForge's)."""
    from inspector.doctor.wiring.trained import SEARCH_ALL_LAYERS, search_layers

    assert search_layers(6, [2, 4, 6]) == list(range(7))
    assert search_layers(SEARCH_ALL_LAYERS, None) == list(range(SEARCH_ALL_LAYERS + 1))
    assert search_layers(13, None) == [0, 1, 2, 5, 6, 9, 10, 13]
    assert search_layers(61, [1, 29, 57]) == [0, 1, 2, 28, 29, 30, 56, 57, 58, 61]
    assert search_layers(61, [60]) == [0, 1, 2, 29, 30, 57, 58, 59, 60, 61]


def test_the_warning_says_only_what_the_search_settled():
    """No line without a configured wiring, when it is the trained one, or when the search
    cannot tell them apart; the line with both figures otherwise."""
    from dataclasses import replace

    from inspector.doctor.wiring.trained import TrainedWiring
    from inspector.metrics import Counts

    t = TrainedWiring(
        (0, 1, 2),
        "[embed, L2, L4]",
        Counts(60, 100),
        (1, 2, 3),
        "[L2, L4, L6]",
        Counts(20, 100),
        True,
        9.0,
        tuple(range(8)),
        24,
    )
    assert t.warning() == (
        "the draft's config names [L2, L4, L6] (20.0%), but the weights fit [embed, L2, L4] best "
        "(60.0% step-0 all-tok on 8 samples): an engine reading this config feeds the wrong "
        "layers (`eagle-inspect doctor` gives the serving ids)"
    )
    assert t.config_wrong and not t.config_is_trained
    assert replace(t, clearly=False).warning() is None
    assert replace(t, configured=None, configured_label=None).warning() is None
    assert replace(t, configured=(0, 1, 2)).warning() is None
    assert replace(t, configured=(0, 1, 2)).config_is_trained
