"""The draft-shape table (inspector/doctor/checks/shape_support.py) on raw configs: what each engine
release does with each shape, as its own source says and as it did when run here on drafts of
each shape (docs/guides/draft-shapes.md has the runs)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from inspector.doctor.checks.shape_support import shape_finding
from inspector.doctor.finding import Kind, Severity
from inspector.engines.llamacpp import shape_rule as llamacpp_0c1e570
from inspector.engines.sglang import shape_rule as sglang_0523
from inspector.engines.shapes import Support, shape_of
from inspector.engines.vllm import shape_rule as vllm_032


def _speculators(ids, **layer) -> dict:
    return {
        "eagle_aux_hidden_state_layer_ids": ids,
        "transformer_layer_config": {"model_type": "llama", "num_hidden_layers": 1, **layer},
    }


def _shape(raw, *, slots=3, layers=1, qk_norm=False, mla=False, **flags):
    return shape_of(raw, slots=slots, layers=layers, qk_norm=qk_norm, mla=mla, flags=flags)


def test_where_n_is_stated():
    raw = _speculators([2, 4], num_aux_hidden_states=2)
    assert _shape(raw, slots=2).n_stated == {"num_aux_hidden_states": 2, "top": 2}
    plain = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 5, 7]}}
    s = _shape(plain, slots=4)
    assert s.n_stated == {"eagle_config": 4} and not s.speculators
    # a plain config's own num_aux_hidden_states is read at its top level
    assert _shape({"num_aux_hidden_states": 4}, slots=4).n_stated == {"num_aux_hidden_states": 4}
    # and a speculators config's top-level one is not what vLLM builds the draft from
    top = {**_speculators([0, 2, 4, 6]), "num_aux_hidden_states": 4}
    assert "num_aux_hidden_states" not in _shape(top, slots=4).n_stated


def test_the_classic_shape_gets_no_finding():
    assert shape_finding(_shape(_speculators([0, 2, 4]))) is None


@pytest.mark.parametrize(
    "flags,variant",
    [
        ({"fc_norm": True, "norm_output": True}, "the paper and vLLM"),
        ({"norm_before_fc": True, "norm_output": True}, "as speculators first shipped it"),
        ({"norm_before_fc": True}, "EAGLE-3 with norm_before_fc"),
    ],
)
def test_the_two_meanings_of_eagle_3_1(flags, variant):
    assert variant in _shape(_speculators([0, 2, 4]), **flags).variant


def _verdicts(shape):
    return {
        name: f(shape)
        for name, f in (
            ("vllm_032", vllm_032),
            ("sglang_0523", sglang_0523),
            ("llamacpp_0c1e570", llamacpp_0c1e570),
        )
    }


def test_fc_norm_eagle_3_1():
    v = _verdicts(_shape(_speculators([0, 2, 4]), fc_norm=True, norm_output=True))
    assert v["vllm_032"].support is Support.SERVES
    assert v["sglang_0523"].support is Support.SERVES
    lc = v["llamacpp_0c1e570"]
    assert lc.support is Support.REFUSES and "fc_norm.0.weight" in lc.why[0]


def test_speculators_eagle_3_1_runs_on_llamacpp_without_norm_output():
    lc = llamacpp_0c1e570(_shape(_speculators([0, 2, 4]), norm_before_fc=True, norm_output=True))
    assert lc.support is Support.DROPS and lc.dropped == "norm_output"
    # norm_before_fc alone it serves (0c1e570 reads it from the GGUF)
    lc = llamacpp_0c1e570(_shape(_speculators([0, 2, 4]), norm_before_fc=True))
    assert lc.support is Support.SERVES


def test_n_slots_in_a_speculators_config():
    """vLLM's Llama class sizes fc from num_aux_hidden_states or eagle_config's ids, never the
    top-level ids: a speculators draft of 2 or 4 slots stops at fc.weight, until its
    transformer_layer_config says num_aux_hidden_states."""
    for n, ids in ((2, [2, 4]), (4, [0, 2, 4, 6]), (1, [6])):
        v = vllm_032(_shape(_speculators(ids), slots=n))
        assert v.support is Support.REFUSES and f"takes {n}" in v.why[0]
        assert v.fix == f'write "num_aux_hidden_states": {n} in transformer_layer_config'
        fixed = _speculators(ids, num_aux_hidden_states=n)
        assert vllm_032(_shape(fixed, slots=n)).support is Support.SERVES
        # SGLang serves it from its own layout (the N ids under eagle_config)
        assert sglang_0523(_shape(_speculators(ids), slots=n)).support is Support.SERVES
        lc = llamacpp_0c1e570(_shape(fixed, slots=n))
        assert lc.support is Support.REFUSES and "exactly 3 entries" in lc.why[0]


def test_n_slots_in_a_plain_config():
    top = {"eagle_aux_hidden_state_layer_ids": [1, 3]}
    for f in (vllm_032, sglang_0523):
        v = f(_shape(top, slots=2))
        assert v.support is Support.REFUSES, f.__name__
    nested = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3]}}
    for f in (vllm_032, sglang_0523):
        assert f(_shape(nested, slots=2)).support is Support.SERVES, f.__name__


def test_a_qwen3_layer():
    shape = _shape(_speculators([0, 2, 4], model_type="qwen3"), qk_norm=True)
    v = _verdicts(shape)
    assert v["vllm_032"].support is Support.SERVES
    sg = v["sglang_0523"]
    assert sg.support is Support.DROPS and sg.dropped == "its q/k norms"
    lc = v["llamacpp_0c1e570"]
    assert lc.support is Support.REFUSES and "k_norm" in lc.why[0]
    # vLLM's Qwen3 class reads the top-level ids for N, unlike its Llama class
    four = _shape(_speculators([0, 2, 4, 6], model_type="qwen3"), slots=4, qk_norm=True)
    assert vllm_032(four).support is Support.SERVES
    # but num_aux_hidden_states, read first, wins over them
    odd = _shape(_speculators([0, 2, 4, 6], model_type="qwen3", num_aux_hidden_states=3), slots=4)
    v = vllm_032(replace(odd, layer="qwen3"))
    assert v.support is Support.REFUSES
    assert v.why[0] == (
        "it sizes fc for 3 slots (num_aux_hidden_states gives 3) and stops at loading "
        "fc.weight, which takes 4"
    )
    llama = vllm_032(_shape(_speculators([0, 2, 4, 6]), slots=4))
    assert llama.why[0] == (
        "it sizes fc for 3 slots (no num_aux_hidden_states, no eagle_config ids; the top-level "
        "ids are not read for this) and stops at loading fc.weight, which takes 4"
    )


def test_two_layers_on_llamacpp_stop_in_the_converter():
    lc = llamacpp_0c1e570(_shape(_speculators([2, 4], num_aux_hidden_states=2), slots=2, layers=2))
    assert lc.support is Support.REFUSES
    assert len(lc.why) == 1 and "'d2t'" in lc.why[0]  # the server is never reached


def test_later_layers_on_sglang():
    """SGLang 0.5.23 normalises layers >= 1 with layers.{i}.hidden_norm: a checkpoint that
    names that norm input_layernorm (speculators, vLLM) runs with a unit weight there."""
    raw = _speculators([2, 4], num_aux_hidden_states=2)
    sg = sglang_0523(_shape(raw, slots=2, layers=2))
    assert sg.support is Support.DROPS and sg.dropped == "the input norms of layers 1 and up"
    assert "layers.{i}.hidden_norm.weight" in sg.fix
    fixed = shape_of(
        raw, slots=2, layers=2, qk_norm=False, mla=False, flags={}, later_hidden_norms=True
    )
    assert sglang_0523(fixed).support is Support.SERVES
    both = _shape(_speculators([0, 2, 4], model_type="qwen3"), layers=2, qk_norm=True)
    assert sglang_0523(both).dropped == "its q/k norms and the input norms of layers 1 and up"
    assert vllm_032(_shape(raw, slots=2, layers=2)).support is Support.SERVES


def test_mla_drafts_are_not_judged():
    shape = _shape({"eagle_config": {}}, mla=True, fc_norm=True)
    assert all(v is None for v in _verdicts(shape).values())
    assert shape_finding(shape) is None


def test_the_finding():
    shape = _shape(_speculators([0, 2, 4], model_type="qwen3"), qk_norm=True)
    f = shape_finding(shape)
    assert f.kind is Kind.DRAFT_SHAPE and f.severity is Severity.WARNING
    assert f.summary.startswith("draft shape: EAGLE-3, 3 slots, 1 decoder layer, Qwen3 layer")
    assert "vLLM 0.32 serves it" in f.summary
    assert "SGLang 0.5.23 runs it without its q/k norms" in f.summary
    assert "SGLang 0.5.23: serve it on vLLM" in f.fix
    # an engine the user named that runs it without a feature: an error
    assert shape_finding(shape, ["sglang"]).severity is Severity.ERROR
    named = shape_finding(shape, ["vllm"])
    assert named.severity is Severity.INFO and "SGLang" not in named.summary and named.fix is None
    # refusing is a warning even when named: the engine says so itself
    four = _shape(_speculators([0, 2, 4, 6]), slots=4)
    assert shape_finding(four, ["vllm"]).severity is Severity.WARNING
    d = f.evidence
    assert d["shape"]["layer"] == "qwen3"
    assert [e["support"] for e in d["engines"]] == ["serves", "runs without", "refuses"]


def test_the_shape_in_words_and_json():
    fc = _shape(_speculators([0, 2, 4]), fc_norm=True, norm_output=True)
    assert fc.words() == (
        "EAGLE-3.1 as the paper and vLLM mean it (fc_norm: one RMSNorm per slot), norm_output, "
        "3 slots, 1 decoder layer"
    )
    one = _shape(_speculators([6], model_type="qwen3"), slots=1, layers=2, qk_norm=True)
    assert one.words() == "EAGLE-3, 1 slot, 2 decoder layers, Qwen3 layer (q/k norms)"
    assert _shape({}, mla=True).words() == "EAGLE-3, 3 slots, 1 decoder layer, MLA layer"
    assert one.to_dict() == {
        "variant": "EAGLE-3",
        "slots": 1,
        "layers": 2,
        "layer": "qwen3",
        "fc_norm": False,
        "norm_before_fc": False,
        "norm_output": False,
        "speculators": True,
        "n_stated": {"top": 1},
    }
    assert not one.classic and not fc.classic
    for changed in ({"slots": 2}, {"layers": 2}, {"layer": "qwen3"}, {"norm_output": True}):
        assert not replace(_shape(_speculators([0, 2, 4])), **changed).classic, changed


def test_a_verdict_in_words_and_json():
    sg = sglang_0523(_shape(_speculators([0, 2, 4], model_type="qwen3"), qk_norm=True))
    assert sg.to_dict() == {
        "engine": "SGLang 0.5.23",
        "support": "runs without",
        "why": [
            "its one EAGLE-3 class is a Llama layer, whose load_weights skips q_norm and k_norm "
            "(no such parameters)",
            "served from a config in its own layout, the ids under eagle_config",
        ],
        "fix": "serve it on vLLM, whose Eagle3Qwen3ForCausalLM applies them",
        "source": "SGLang 0.5.23 srt/models/llama_eagle3.py (run)",
        "dropped": "its q/k norms",
    }
    served = vllm_032(_shape(_speculators([0, 2, 4]), fc_norm=True))
    assert served.words() == "vLLM 0.32 serves it" and served.to_dict()["dropped"] is None
    plain = sglang_0523(_shape({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 5]}}))
    assert plain.support is Support.SERVES and plain.why == ()
    lc = llamacpp_0c1e570(_shape(_speculators([0, 2, 4]), fc_norm=True))
    assert lc.words() == (
        'llama.cpp @0c1e570 refuses it (its converter stops: "Can not map tensor '
        "'fc_norm.0.weight'\")"
    )
    assert lc.fix == "serve it on vLLM or SGLang"


LC_SOURCE = "llama.cpp @0c1e570 conversion/llama.py, src/models/eagle3.cpp (run)"


@pytest.mark.parametrize(
    "shape,support,why,fix",
    [
        (
            _shape(_speculators([2, 4]), slots=2, layers=2),
            "refuses",
            [
                "its converter takes a draft for EAGLE-3 only with num_hidden_layers 1, and "
                "stops on the rest: \"Can not map tensor 'd2t'\""
            ],
            "serve it on vLLM or SGLang",
        ),
        (
            _shape(_speculators([0, 2, 4], model_type="qwen3"), qk_norm=True),
            "refuses",
            [
                'its converter stops on the q/k norms: "Can not map tensor '
                "'model.layers.0.self_attn.k_norm.weight'\""
            ],
            "serve it on vLLM",
        ),
        (
            _shape(_speculators([0, 2, 4, 6]), slots=4),
            "refuses",
            [
                'llama-server stops at loading it: "EAGLE3 requires exactly 3 entries in '
                "'extract_layers'\""
            ],
            "serve it on vLLM or SGLang",
        ),
        (
            _shape(_speculators([0, 2, 4]), norm_before_fc=True, norm_output=True),
            "runs without",
            [
                "neither its converter nor its graph reads it: every drafting step after the "
                "first is fed the pre-norm output"
            ],
            "serve it on vLLM or SGLang, which apply norm_output",
        ),
    ],
)
def test_each_llamacpp_verdict_in_full(shape, support, why, fix):
    v = llamacpp_0c1e570(shape).to_dict()
    assert (v["support"], v["why"], v["fix"], v["source"]) == (support, why, fix, LC_SOURCE)
    assert llamacpp_0c1e570(_shape(_speculators([0, 2, 4]), norm_before_fc=True)).source == (
        LC_SOURCE
    )


def test_verdict_words_join_their_reasons():
    both = _shape(_speculators([0, 2, 4], model_type="qwen3"), layers=2, qk_norm=True)
    assert (
        sglang_0523(both)
        .words()
        .startswith(
            "SGLang 0.5.23 runs it without its q/k norms and the input norms of layers 1 and up "
            "(its one EAGLE-3 class is a Llama layer, whose load_weights skips q_norm and k_norm "
            "(no such parameters); its layers after the first"
        )
    )
    served = sglang_0523(_shape(_speculators([0, 2, 4]), fc_norm=True))
    assert served.words() == (
        "SGLang 0.5.23 serves it (served from a config in its own layout, the ids under "
        "eagle_config)"
    )
    plain = vllm_032(_shape({"eagle_aux_hidden_state_layer_ids": [1, 3]}, slots=2))
    assert plain.fix == 'write "num_aux_hidden_states": 2 in config.json'


VLLM_SRC = "vLLM 0.32.0 llama_eagle3.py, qwen3_eagle3.py, speculators/algos.py (run)"
SGLANG_SRC = "SGLang 0.5.23 srt/models/llama_eagle3.py (run)"


def _v(engine, support, why=(), fix=None, source="", dropped=None) -> dict:
    return {
        "engine": engine,
        "support": support,
        "why": list(why),
        "fix": fix,
        "source": source,
        "dropped": dropped,
    }


def _nested(ids):
    return {"eagle_config": {"eagle_aux_hidden_state_layer_ids": ids}}


@pytest.mark.parametrize(
    "rule,shape,want",
    [
        (
            vllm_032,
            _shape(_speculators([2, 4]), slots=2),
            _v(
                "vLLM 0.32",
                "refuses",
                [
                    "it sizes fc for 3 slots (no num_aux_hidden_states, no eagle_config ids; the "
                    "top-level ids are not read for this) and stops at loading fc.weight, which "
                    "takes 2"
                ],
                'write "num_aux_hidden_states": 2 in transformer_layer_config',
                VLLM_SRC,
            ),
        ),
        (
            vllm_032,
            _shape(_nested([1, 3, 5]), slots=4),
            _v(
                "vLLM 0.32",
                "refuses",
                [
                    "it sizes fc for 3 slots (eagle_config gives 3; the top-level ids are not "
                    "read for this) and stops at loading fc.weight, which takes 4"
                ],
                'write "num_aux_hidden_states": 4 in config.json',
                VLLM_SRC,
            ),
        ),
        (vllm_032, _shape(_nested([1, 3, 5])), _v("vLLM 0.32", "serves", source=VLLM_SRC)),
        (
            sglang_0523,
            _shape({**_nested([1, 3, 5]), "num_aux_hidden_states": 2}),
            _v(
                "SGLang 0.5.23",
                "refuses",
                [
                    "it sizes fc for 2 slots (num_aux_hidden_states; it never reads the "
                    "top-level ids) and stops at loading fc.weight, which takes 3"
                ],
                "write the ids under eagle_config.eagle_aux_hidden_state_layer_ids",
                SGLANG_SRC,
            ),
        ),
        (
            sglang_0523,
            _shape(_nested([1, 3, 5, 7])),
            _v(
                "SGLang 0.5.23",
                "refuses",
                [
                    "it sizes fc for 4 slots (eagle_config's ids; it never reads the top-level "
                    "ids) and stops at loading fc.weight, which takes 3"
                ],
                "write the ids under eagle_config.eagle_aux_hidden_state_layer_ids",
                SGLANG_SRC,
            ),
        ),
        (
            sglang_0523,
            _shape({"eagle_aux_hidden_state_layer_ids": [1, 3]}, slots=2),
            _v(
                "SGLang 0.5.23",
                "refuses",
                [
                    "it sizes fc for 3 slots (no eagle_config ids; it never reads the top-level "
                    "ids) and stops at loading fc.weight, which takes 2"
                ],
                "write the ids under eagle_config.eagle_aux_hidden_state_layer_ids",
                SGLANG_SRC,
            ),
        ),
        (sglang_0523, _shape(_nested([1, 3, 5])), _v("SGLang 0.5.23", "serves", source=SGLANG_SRC)),
        (
            sglang_0523,
            _shape(_speculators([2, 4]), slots=2, layers=2),
            _v(
                "SGLang 0.5.23",
                "runs without",
                [
                    "its layers after the first normalise their input with "
                    "layers.{i}.hidden_norm, which this checkpoint does not hold (it names that "
                    "norm input_layernorm), so a unit weight stands in for it",
                    "served from a config in its own layout, the ids under eagle_config",
                ],
                "copy layers.{i}.input_layernorm.weight to layers.{i}.hidden_norm.weight "
                "(i >= 1) in the checkpoint SGLang loads",
                SGLANG_SRC,
                "the input norms of layers 1 and up",
            ),
        ),
        (
            llamacpp_0c1e570,
            _shape(_nested([1, 3, 5]), norm_before_fc=True),
            _v("llama.cpp @0c1e570", "serves", source=LC_SOURCE),
        ),
    ],
)
def test_each_verdict_in_full(rule, shape, want):
    assert rule(shape).to_dict() == want


def test_a_qwen3_layer_in_a_plain_config_is_not_judged_by_vllm():
    assert vllm_032(_shape(_nested([1, 3, 5]), qk_norm=True)) is None


def test_ids_that_are_not_a_list_state_nothing():
    assert _shape({"eagle_aux_hidden_state_layer_ids": "0,2,4"}).n_stated == {}
    assert _shape({"eagle_aux_hidden_state_layer_ids": []}).n_stated == {}
    assert _shape({"eagle_config": {"eagle_aux_hidden_state_layer_ids": 3}}).n_stated == {}
    assert _shape({"eagle_config": "x", "num_aux_hidden_states": "3"}).n_stated == {}


def test_the_finding_joins_every_engine():
    f = shape_finding(_shape(_speculators([0, 2, 4], model_type="qwen3"), qk_norm=True))
    assert f.summary == (
        "draft shape: EAGLE-3, 3 slots, 1 decoder layer, Qwen3 layer (q/k norms): vLLM 0.32 "
        "serves it; SGLang 0.5.23 runs it without its q/k norms (its one EAGLE-3 class is a "
        "Llama layer, whose load_weights skips q_norm and k_norm (no such parameters); served "
        "from a config in its own layout, the ids under eagle_config); llama.cpp @0c1e570 "
        'refuses it (its converter stops on the q/k norms: "Can not map tensor '
        "'model.layers.0.self_attn.k_norm.weight'\")"
    )
    assert f.fix == (
        "SGLang 0.5.23: serve it on vLLM, whose Eagle3Qwen3ForCausalLM applies them; "
        "llama.cpp @0c1e570: serve it on vLLM"
    )


def test_the_joins_and_labels_the_table_above_leaves_out():
    """Two llama.cpp refusals in one sentence; SGLang's two fixes in one; the label of every
    llama.cpp verdict; vLLM's Qwen3 class falling back to eagle_config's ids."""
    both = llamacpp_0c1e570(_shape(_speculators([0, 2, 4]), layers=2, fc_norm=True))
    assert both.words() == (
        "llama.cpp @0c1e570 refuses it (its converter takes a draft for EAGLE-3 only with "
        "num_hidden_layers 1, and stops on the rest: \"Can not map tensor 'd2t'\"; its "
        "converter stops: \"Can not map tensor 'fc_norm.0.weight'\")"
    )
    drop = llamacpp_0c1e570(_shape(_speculators([0, 2, 4]), norm_output=True))
    assert drop.engine == "llama.cpp @0c1e570" and drop.words().startswith(
        "llama.cpp @0c1e570 runs it without norm_output (neither"
    )
    assert both.engine == drop.engine == llamacpp_0c1e570(_shape(_nested([1, 3, 5]))).engine
    two = sglang_0523(_shape(_speculators([0, 2, 4], model_type="qwen3"), layers=2, qk_norm=True))
    assert two.fix == (
        "serve it on vLLM, whose Eagle3Qwen3ForCausalLM applies them; copy "
        "layers.{i}.input_layernorm.weight to layers.{i}.hidden_norm.weight (i >= 1) in the "
        "checkpoint SGLang loads"
    )
    nested = {
        "transformer_layer_config": {"model_type": "qwen3"},
        **_nested([0, 2, 4, 6]),
    }
    assert vllm_032(_shape(nested, slots=4, qk_norm=True)).support is Support.SERVES
