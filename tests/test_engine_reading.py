"""What each engine release reads from a draft's config, and the layers it feeds: the public
configs (read from ../shared/configs, skipped where absent) and small built ones, then the
doctor's engine_feeds finding on the demo draft with its ids where each engine looks or not."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from inspector.doctor.wiring.engine_reading import READERS, engine_reads

CONFIGS = Path(__file__).resolve().parents[2] / "shared" / "configs"
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama"}
DEEPSEEK = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3"}
GPT_OSS = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss"}


def public(name: str) -> dict:
    path = CONFIGS / name
    if not path.is_file():
        pytest.skip(f"{path} absent (the public draft configs live beside the project)")
    return json.loads(path.read_text())


def fed(config: dict, layers: int, target=None, n_blocks: int = 3) -> dict[str, object]:
    """label -> the HF indices fed, or the problem / layout refusal in words."""
    out = {}
    for r in engine_reads(config, layers, n_blocks, target=target):
        out[r.reader.label] = r.unsupported or r.problem or r.hf or [list(h) for h in r.readings]
    return out


def test_a_specforge_deepseek_draft_is_fed_three_ways():
    """SpecForge nests [1, 29, 57] under eagle_config (its trainer: the output of layer i, HF
    i + 1): SGLang's DeepSeek file adds 1 (first id 1), vLLM's V1 runner reads the nested ids
    verbatim as HF indices (one layer early), its V2 runner and llama.cpp's converter never look
    there and fall back to [2, L//2, L-3]."""
    cfg = public("specforge-deepseek-v3.json")
    got = fed(cfg, 61, DEEPSEEK)
    assert got["SGLang 0.5.23"] == (2, 30, 58)
    assert got["vLLM 0.32"] == (1, 29, 57)
    assert got["vLLM 0.32 MRV2"] == (2, 30, 58)
    assert got["llama.cpp @0c1e570 converted"] == (2, 30, 58)
    reads = {r.reader.label: r for r in engine_reads(cfg, 61, 3, target=DEEPSEEK)}
    assert reads["vLLM 0.32"].where == "eagle_config.eagle_aux_hidden_state_layer_ids"
    assert reads["vLLM 0.32 MRV2"].where is None
    assert "no ids where it looks" in reads["llama.cpp @0c1e570 converted"].notes[0]


def test_a_specforge_gpt_oss_draft_follows_its_own_model_file():
    cfg = public("specforge-gpt-oss-120b.json")
    got = fed(cfg, 36, GPT_OSS)
    assert got["SGLang 0.5.23"] == (2, 18, 34)  # gpt_oss.py: +1 unless the largest id is L
    assert got["vLLM 0.32"] == (1, 17, 33)
    assert got["llama.cpp @0c1e570 converted"] == (2, 18, 33)


def test_an_unknown_target_class_gives_sglang_both_readings():
    cfg = public("specforge-qwen3-235b-a22b.json")
    got = fed(cfg, 94, None)
    assert got["SGLang 0.5.23"] == [[2, 47, 91], [2, 47, 91]] or got["SGLang 0.5.23"] == (
        2,
        47,
        91,
    )  # both rules agree when the first id is 1
    cfg = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58]}}
    assert fed(cfg, 61, None)["SGLang 0.5.23"] == [[3, 31, 59], [2, 30, 58]]


def test_configs_without_ids_collapse_on_a_small_target():
    """No ids anywhere: every reader's default [2, L//2, L-3]; on 5 layers they coincide and no
    engine but llama.cpp can feed a 3-block fc: llama.cpp feeds L2 to all three blocks."""
    cfg = public("specforge-llama3.3-70b.json")
    assert set(fed(cfg, 80, LLAMA).values()) == {(2, 40, 77)}
    small = fed(cfg, 5, LLAMA)
    lc = small.pop("llama.cpp @0c1e570 converted")
    assert all("1 state for an fc that takes 3" in str(v) for v in small.values()), small
    assert lc == (2,)
    read = next(r for r in engine_reads(cfg, 5, 3, target=LLAMA) if r.reader.engine == "llamacpp")
    assert read.fed == (2, 2, 2) and read.problem is None
    assert read.notes[-1] == "ids [2, 2, 2] repeat a layer: llama.cpp feeds it to 3 fc blocks"


def test_the_last_layer_feeds_nothing_in_llama_cpp_only():
    cfg = {"eagle_aux_hidden_state_layer_ids": [2, 4, 6]}
    got = fed(cfg, 6, LLAMA)
    assert got["vLLM 0.32"] == (2, 4, 6)
    assert "id 6 (the last layer's output) feeds nothing" in got["llama.cpp @0c1e570 converted"]


def test_norm_flags_as_each_engine_runs_them():
    """norm_before_residual absent: vLLM's speculators reader runs true, its plain reader and
    llama.cpp's converter false; SGLang reads it nowhere."""
    spec = {"speculators_config": {}, "eagle_aux_hidden_state_layer_ids": [0, 2, 4]}
    plain = {"eagle_aux_hidden_state_layer_ids": [0, 2, 4]}
    norms = {
        (name, r.reader.label): dict((k, v) for k, v, _ in r.norms)
        for name, cfg in (("spec", spec), ("plain", plain))
        for r in engine_reads(cfg, 6, 3, target=LLAMA)
        if not r.unsupported
    }
    assert norms["spec", "vLLM 0.32"]["norm_before_residual"] is True
    assert norms["plain", "vLLM 0.32"]["norm_before_residual"] is False
    assert norms["spec", "llama.cpp @0c1e570 converted"]["norm_before_residual"] is False
    assert norms["plain", "SGLang 0.5.23"]["norm_before_residual"] is False
    explicit = {**plain, "norm_before_residual": True}
    sg = next(r for r in engine_reads(explicit, 6, 3, target=LLAMA) if r.reader.engine == "sglang")
    assert dict((k, v) for k, v, _ in sg.norms)["norm_before_residual"] is False


def test_sglang_does_not_load_a_speculators_layout():
    got = fed({"speculators_config": {}, "eagle_aux_hidden_state_layer_ids": [0, 2, 4]}, 6)
    assert "does not load the speculators layout" in got["SGLang 0.5.23"]


def test_every_reader_names_its_source():
    for r in READERS:
        assert r.source and any(ch.isdigit() for ch in r.source), r.label


# --- the doctor's finding on the demo draft --------------------------------------------------


def _doctor(capsys, draft: Path, held: Path, target: Path, *extra: str) -> dict:
    """The engine_feeds finding of `doctor --json` (exit 1: the report has errors)."""
    from inspector.cli import main

    capsys.readouterr()
    argv = ["doctor", str(draft), str(held), "--target", str(target), "--json", "--device", "cpu"]
    rc = main([*argv, *extra])
    doc = json.loads(capsys.readouterr().out)
    errors = any(f["severity"] == "error" for f in doc["findings"])
    assert rc == (1 if errors else 0)
    return next(f for f in doc["findings"] if f["kind"] == "engine_feeds")


def _copy(demo, folder: Path, edit) -> Path:
    shutil.copytree(demo.draft, folder)
    cfg = json.loads((folder / "config.json").read_text())
    edit(cfg)
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


@pytest.fixture
def held(demo) -> Path:
    return demo.draft.parent / "samples" / "held"


def test_doctor_shows_what_each_engine_feeds_a_nested_config(capsys, demo, held, tmp_path):
    """The demo's ids written SGLang's way under eagle_config ([-1, 1, 3]): SGLang feeds the
    trained [embed, L2, L4]; vLLM reads -1 as an HF index (no such state); the V2 runner and
    llama.cpp's converter find nothing and fall back to [2, 3, 3]: two states for vLLM, L3 twice for
    llama.cpp."""

    def nest(cfg):
        cfg.pop("eagle_aux_hidden_state_layer_ids")
        cfg["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": [-1, 1, 3]}
        cfg.pop("speculators_config", None)

    draft = _copy(demo, tmp_path / "nested", nest)
    f = _doctor(capsys, draft, held, demo.target)
    assert f["severity"] == "error"
    rows = {e["label"]: e for e in f["evidence"]["engines"]}
    sg = rows["SGLang 0.5.23"]
    assert sg["hf_indices"] == [0, 2, 4] and sg["feeds_trained_wiring"] is True
    assert sg["wiring_label"] == "[embed, L2, L4]" and sg["accept_length"] > 1.5
    assert rows["vLLM 0.32"]["problem"] == "HF [-1] outside 0..6: no such state"
    assert (
        rows["vLLM 0.32 MRV2"]["problem"] == "2 states for an fc that takes 3: it cannot serve it"
    )
    # llama.cpp feeds each listed id's state, the repeat included: [L2, L3, L3]
    lc = rows["llama.cpp @0c1e570 converted"]
    assert lc["problem"] is None and lc["fed"] == [2, 3, 3]
    assert lc["feeds_trained_wiring"] is False  # the held samples hold no L3 slot
    # --engine keeps one engine's rows
    only = _doctor(capsys, draft, held, demo.target, "--engine", "sglang")
    assert [e["engine"] for e in only["evidence"]["engines"]] == ["sglang"]
    assert only["severity"] == "info"


def test_doctor_on_a_config_naming_the_serving_ids(capsys, demo, held, tmp_path):
    """Top-level [2, 4, 6]: vLLM feeds [L2, L4, L6], clearly worse than the trained wiring, with
    its accept length; llama.cpp feeds nothing for id 6."""

    def serving_ids(cfg):
        cfg["eagle_aux_hidden_state_layer_ids"] = [2, 4, 6]

    draft = _copy(demo, tmp_path / "deployed", serving_ids)
    f = _doctor(capsys, draft, held, demo.target)
    rows = {e["label"]: e for e in f["evidence"]["engines"]}
    v = rows["vLLM 0.32"]
    assert f["severity"] == "error" and v["wiring_label"] == "[L2, L4, L6]"
    assert v["feeds_trained_wiring"] is False
    assert v["all_tok"]["acc"] < 0.3 and v["accept_length"] < 1.5
    assert "feeds nothing" in rows["llama.cpp @0c1e570 converted"]["problem"]


def test_sglang_never_captures_the_last_layer_but_on_gpt_oss():
    """SGLang's Llama file captures the input of layers 0..L-1: ids reaching HF L leave the fc
    a state short. The real SGLang 0.5.23 (CPU) given the demo draft with eagle_config ids
    [1, 3, 5] (HF [2, 4, 6]) stopped at its first request: "mat1 and mat2 shapes cannot be
    multiplied (26x256 and 384x128)", two 128-wide states for a 384-wide fc."""
    cfg = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 5]}}
    sg = next(r for r in engine_reads(cfg, 6, 3, target=LLAMA) if r.reader.engine == "sglang")
    assert sg.hf == (2, 4, 6)
    assert sg.problem == (
        "HF 6 (the last layer's output) is never captured: SGLang's model file captures the "
        "input of layers 0..5, so 2 states reach an fc that takes 3 (a shape error at the first "
        "request)"
    )
    oss = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 12, 24]}}
    sg = next(r for r in engine_reads(oss, 24, 3, target=GPT_OSS) if r.reader.engine == "sglang")
    assert sg.hf == (2, 12, 24) and sg.problem is None


def test_a_gguf_is_read_by_llama_cpp_alone():
    """A GGUF's baked eagle3.target_layers: llama.cpp's runtime reads them (the input of layer
    i); vLLM and SGLang serve no GGUF draft."""
    baked = {"eagle3": {"target_layers": [2, 4, 6], "norm_before_residual": True}}
    reads = engine_reads(baked, 6, 3, target=LLAMA, gguf=True)
    assert [r.reader.label for r in reads] == ["llama.cpp @0c1e570 GGUF"]
    (r,) = reads
    assert r.where == "eagle3.target_layers" and r.hf == (2, 4, 6)
    assert "feeds nothing" in r.problem
    assert dict((k, v) for k, v, _ in r.norms)["norm_before_residual"] is True
    assert engine_reads(baked, 6, 3, target=LLAMA)[0].where is None  # not a config.json key


def test_the_words_and_fields_of_a_reading():
    """What mutation testing showed untested: each reading's notes, its ids and norm wording,
    an empty id list read as none, and the JSON form."""
    from inspector.doctor.wiring.engine_reading import EngineRead

    cfg = {
        "eagle_aux_hidden_state_layer_ids": [],
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 1, 3]},
    }
    reads = {r.reader.label: r for r in engine_reads(cfg, 6, 3, target=LLAMA)}
    v = reads["vLLM 0.32"]  # an empty top-level list is no ids: the nested ones are read
    assert v.where == "eagle_config.eagle_aux_hidden_state_layer_ids" and v.ids == (1, 1, 3)
    assert v.notes == ("ids [1, 1, 3] repeat a layer: it is captured once",)
    assert v.problem == "2 states for an fc that takes 3: it cannot serve it"
    sg = reads["SGLang 0.5.23"]
    assert sg.notes[0] == "Llama: SGLang adds 1 to every id" and sg.hf == (2, 4)
    conv = reads["llama.cpp @0c1e570 converted"]
    assert conv.notes == (
        "no ids where it looks (eagle_aux_hidden_state_layer_ids): its default [2, L//2, L-3] = "
        "[2, 3, 3]",
        "ids [2, 3, 3] repeat a layer: llama.cpp feeds it to 2 fc blocks",
    )
    assert conv.problem is None and conv.fed == (2, 3, 3)
    ok = engine_reads({"eagle_aux_hidden_state_layer_ids": [0, 2, 4]}, 6, 3, target=LLAMA)[0]
    assert ok.notes == () and ok.problem is None and ok.hf == (0, 2, 4)
    assert ok.norms[0] == (
        "norm_before_residual",
        False,
        "absent: its default false (plain config)",
    )
    spec = engine_reads(
        {"speculators_config": {}, "eagle_aux_hidden_state_layer_ids": [0, 2, 4]}, 6, 3
    )[0]
    assert spec.norms[0] == (
        "norm_before_residual",
        True,
        "absent: its default true (speculators config)",
    )
    nested = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58]}}
    unknown = next(r for r in engine_reads(nested, 61, 3) if r.reader.engine == "sglang")
    assert unknown.hf is None and unknown.readings == ((3, 31, 59), (2, 30, 58))
    assert unknown.notes == (
        "target class unknown: its model file decides (+1 to every id, as Llama's, or only when "
        "the first id is 1, as DeepSeek-V2/V3's)",
    )
    d = ok.to_dict()
    assert d == {
        "engine": "vllm",
        "version": "0.32",
        "path": "V1 model runner",
        "label": "vLLM 0.32",
        "reads": "eagle_aux_hidden_state_layer_ids",
        "ids": [0, 2, 4],
        "hf_indices": [0, 2, 4],
        "readings": [],
        "problem": None,
        "norms": {
            "norm_before_residual": {
                "value": False,
                "how": "absent: its default false (plain config)",
            },
            "norm_before_fc": {"value": False, "how": "absent: its default false (config)"},
            "fc_norm": {"value": False, "how": "absent: its default false (config)"},
            "norm_output": {"value": False, "how": "absent: its default false (config)"},
        },
        "notes": [],
        "unsupported": None,
        "fed": [0, 2, 4],
        "source": ok.reader.source,
    }
    assert isinstance(ok, EngineRead)


def test_what_an_engine_may_be_feeding():
    """`fed_candidates`: each reader's wiring that it can serve, then the configured ids one off
    either way (within 0..L, the fc's width), each once, in that order."""
    from inspector.doctor.wiring.engine_reading import fed_candidates

    cfg = {"eagle_aux_hidden_state_layer_ids": [0, 2, 4]}
    assert fed_candidates(cfg, 6, 3, [0, 2, 4], target=LLAMA) == [
        ("vLLM 0.32 feeds", (0, 2, 4)),
        ("ids +1", (1, 3, 5)),
    ]
    mid = {"eagle_aux_hidden_state_layer_ids": [2, 3, 5]}
    assert fed_candidates(mid, 6, 3, [2, 3, 5], target=LLAMA) == [
        ("vLLM 0.32 feeds", (2, 3, 5)),
        ("ids +1", (3, 4, 6)),
        ("ids -1", (1, 2, 4)),
    ]
    nested = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 5]}}
    got = dict((hf, name) for name, hf in fed_candidates(nested, 8, 3, None, target=LLAMA))
    assert got == {
        (1, 3, 5): "vLLM 0.32 feeds",
        (2, 4, 5): "vLLM 0.32 MRV2 feeds",
        (2, 4, 6): "SGLang 0.5.23 feeds",
    }
    assert fed_candidates(cfg, 6, 4, [0, 2, 4]) == []  # no reading gives a 4-block fc


def test_llamacpp_feeds_as_listed_and_nothing_for_the_layer_count():
    """llama.cpp concatenates the states in the order the ids are listed, and on a Llama-family
    target an id equal to the layer count feeds nothing (None: its fc block gets zeros); vLLM
    feeds ascending. Both are candidates for what the engine feeds."""
    from inspector.doctor.wiring.engine_reading import fed_candidates

    rev = {"eagle_aux_hidden_state_layer_ids": [4, 2, 0]}
    reads = {r.reader.label: r for r in engine_reads(rev, 6, 3, target=LLAMA)}
    assert reads["vLLM 0.32"].fed == (0, 2, 4)
    assert reads["llama.cpp @0c1e570 converted"].fed == (4, 2, 0)
    assert reads["llama.cpp @0c1e570 converted"].hf == (0, 2, 4)
    assert fed_candidates(rev, 6, 3, None, target=LLAMA) == [
        ("vLLM 0.32 feeds", (0, 2, 4)),
        ("llama.cpp @0c1e570 converted feeds", (4, 2, 0)),
    ]
    last = {"eagle_aux_hidden_state_layer_ids": [2, 4, 6]}
    lc = next(r for r in engine_reads(last, 6, 3, target=LLAMA) if r.reader.engine == "llamacpp")
    assert lc.fed == (2, 4, None) and lc.problem is not None and "feeds nothing" in lc.problem
    assert lc.to_dict()["fed"] == [2, 4, None]
    assert fed_candidates(last, 6, 3, None, target=LLAMA) == [
        ("vLLM 0.32 feeds", (2, 4, 6)),
        ("llama.cpp @0c1e570 converted feeds", (2, 4, None)),
    ]
    # a GGUF's baked ids, read as llama.cpp reads them
    baked = {"eagle3": {"target_layers": [6, 2, 4]}}
    g = engine_reads(baked, 6, 3, target=LLAMA, gguf=True)
    assert [r.fed for r in g] == [(None, 2, 4)]
    # an id past the layer count aborts: nothing is fed, nothing is a candidate
    past = {"eagle_aux_hidden_state_layer_ids": [2, 4, 7]}
    assert all(r.fed is None for r in engine_reads(past, 6, 3) if r.reader.engine == "llamacpp")


def test_the_readings_mutation_testing_asked_for():
    """A reader that adds 1 to the ids it finds (vLLM's V2 runner on a top-level
    target_layer_ids, DFlash/DSpark semantics), ids out of range, SGLang's two readings when they
    agree, and the refusal of the speculators layout in full."""
    from inspector.doctor.wiring.engine_reading import fed_candidates

    tli = {"target_layer_ids": [1, 3, 5]}
    reads = {r.reader.label: r for r in engine_reads(tli, 8, 3, target=LLAMA)}
    assert reads["vLLM 0.32 MRV2"].where == "target_layer_ids"
    assert reads["vLLM 0.32 MRV2"].hf == (2, 4, 6)
    assert reads["vLLM 0.32"].where is None and reads["vLLM 0.32"].hf == (2, 4, 5)
    low = {"eagle_aux_hidden_state_layer_ids": [-1, 1, 3]}
    v = engine_reads(low, 6, 3, target=LLAMA)[0]
    assert v.problem == "HF [-1] outside 0..6: no such state"
    high = {"eagle_aux_hidden_state_layer_ids": [2, 4, 7]}
    assert engine_reads(high, 6, 3, target=LLAMA)[0].problem == "HF [7] outside 0..6: no such state"
    agree = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 46, 90]}}
    sg = next(r for r in engine_reads(agree, 94, 3) if r.reader.engine == "sglang")
    assert sg.hf == (2, 47, 91) and sg.readings == ((2, 47, 91), (2, 47, 91))
    assert sg.to_dict()["readings"] == [[2, 47, 91], [2, 47, 91]]
    split = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58]}}
    none = next(r for r in engine_reads(split, 61, 3) if r.reader.engine == "sglang")
    assert none.to_dict()["hf_indices"] is None and none.to_dict()["ids"] == [2, 30, 58]
    unsupported = next(
        r for r in engine_reads({"speculators_config": {}}, 6, 3) if r.reader.engine == "sglang"
    )
    assert unsupported.unsupported == (
        "does not load the speculators layout: rewrite the config in its own (architectures "
        "LlamaForCausalLMEagle3, the ids under eagle_config; the serving_config finding gives "
        "them)"
    )
    assert unsupported.to_dict()["ids"] is None and unsupported.to_dict()["hf_indices"] is None
    # the target's class reaches SGLang's rule, and a shift down to the embedding counts
    assert ("SGLang 0.5.23 feeds", (3, 31, 59)) in fed_candidates(split, 61, 3, None, target=LLAMA)
    assert all(n != "SGLang 0.5.23 feeds" for n, _ in fed_candidates(split, 61, 3, None))
    down = fed_candidates({"eagle_aux_hidden_state_layer_ids": [1, 3, 5]}, 6, 3, [1, 3, 5])
    assert ("ids -1", (0, 2, 4)) in down and ("ids +1", (2, 4, 6)) in down
    baked = {"eagle3": {"target_layers": [0, 2, 4]}}
    assert fed_candidates(baked, 6, 3, None, gguf=True) == [
        ("llama.cpp @0c1e570 GGUF feeds", (0, 2, 4))
    ]


def test_ids_written_in_places_that_disagree(capsys, demo, held, tmp_path):
    """The top level says [2, 4, 6] (HF), eagle_config says [-1, 1, 3] (HF [0, 2, 4] as its
    writers mean it): vLLM reads the first, SGLang the second, and the finding says the places
    disagree; written alike ([0, 2, 4] and [-1, 1, 3]) they agree and nothing is said."""
    from inspector.doctor.wiring.engine_reading import id_places

    both = {"eagle_aux_hidden_state_layer_ids": [0, 2, 4]}
    both["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": [-1, 1, 3]}
    assert id_places(both) == [
        ("eagle_aux_hidden_state_layer_ids", (0, 2, 4), (0, 2, 4)),
        ("eagle_config.eagle_aux_hidden_state_layer_ids", (-1, 1, 3), (0, 2, 4)),
    ]
    assert id_places({"target_layer_ids": [1, 3, 5]}) == [
        ("target_layer_ids", (1, 3, 5), (2, 4, 6))
    ]

    def split(cfg):
        cfg["eagle_aux_hidden_state_layer_ids"] = [2, 4, 6]
        cfg["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": [-1, 1, 3]}

    f = _doctor(capsys, _copy(demo, tmp_path / "split", split), held, demo.target)
    assert f["evidence"]["disagreeing_id_places"] == [
        {"key": "eagle_aux_hidden_state_layer_ids", "ids": [2, 4, 6], "hf_indices": [2, 4, 6]},
        {
            "key": "eagle_config.eagle_aux_hidden_state_layer_ids",
            "ids": [-1, 1, 3],
            "hf_indices": [0, 2, 4],
        },
    ]

    def alike(cfg):
        cfg["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": [-1, 1, 3]}

    f = _doctor(capsys, _copy(demo, tmp_path / "alike", alike), held, demo.target)
    assert f["evidence"]["disagreeing_id_places"] == []
