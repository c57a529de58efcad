"""The engine seam: one module per engine behind one interface, registered under one id, and no
module outside `inspector/engines/` comparing an engine's name or writing its release."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from inspector.doctor.wiring.engine_reading import engine_reads
from inspector.engines import (
    REGISTRY,
    Engine,
    all_engines,
    engine,
    engine_words,
    engines_named,
    parse_engine,
    readers,
    vllm,
)
from inspector.engines.release import Release
from inspector.errors import InputError

PACKAGE = Path(__file__).resolve().parent.parent / "inspector"


def test_every_id_has_one_engine_whose_rows_are_its_own():
    assert set(REGISTRY) == set(Engine)
    for e in all_engines():
        assert e.id.spec is e and e.releases and e.display
        assert all(r.engine is e.id for r in e.readers)
        # a reader's version is one of the releases its engine's module holds
        assert {r.version for r in e.readers} <= {str(x) for x in e.releases}
    assert len(readers()) == sum(len(e.readers) for e in all_engines())


def test_spellings_reach_one_engine_each():
    seen: dict[str, Engine] = {}
    for e in all_engines():
        for alias in (e.id.value, e.display, *e.aliases):
            key = "".join(c for c in alias.lower() if c not in ".-_ ")
            assert seen.setdefault(key, e.id) is e.id, f"{alias} names two engines"
    assert engine("LLaMA.cpp").id is Engine.LLAMACPP
    assert engine_words("llamacpp") == "llama.cpp" and engine_words("trtllm") == "trtllm"
    with pytest.raises(KeyError):
        engine("trtllm")


def test_a_release_is_compared_as_a_version():
    assert Release("0.5.9") < Release("0.5.23") < Release("0.32")
    assert Release("0.32").at_least("0.31.2") and not Release("0.5.23").at_least("0.32")
    assert str(Release("0c1e570", commit=True, vendored_by="x 1")) == "@0c1e570"
    assert Release("0c1e570", commit=True, vendored_by="x 1").words == "@0c1e570 (x 1)"
    with pytest.raises(TypeError):
        Release("0c1e570", commit=True).at_least("0.1")
    with pytest.raises(ValueError):
        Release("v0.32")


def test_dflash_ids_get_plus_one_in_vllm():
    cfg = {"dflash_config": {"target_layer_ids": [1, 16, 30]}}
    got = engine_reads(cfg, 32, 3, draft="eagle3", readers=vllm.READERS)
    assert {r.hf for r in got} == {(2, 17, 31)}


def test_dated_facts_apply_to_the_targets_they_name():
    deepseek = engine(Engine.VLLM).facts_for("deepseek_v3")
    assert any("46973" in f.since for f in deepseek)
    kimi = engine(Engine.VLLM).facts_for("kimi_k3")
    assert any("50815" in f.since and "attn_res" in f.words for f in kimi)
    llama = engine(Engine.VLLM).facts_for("llama")
    assert not any("46973" in f.since or "50815" in f.since for f in llama)
    assert any("48113" in f.since for f in llama)  # every target: DFlash ids get +1
    assert not engine(Engine.VLLM).facts_for("llama", "eagle3")


# --- nothing outside engines/ compares an engine's name or writes its release ---------------

# Identifiers spelled like an engine that name something else: id conventions of a config
# (aux_layer_convention "sglang": eagle_config's ids; "llama.cpp": a GGUF's baked ids).
NOT_ENGINES = {
    "inspector/doctor/checks/layer_ids.py",
    "inspector/doctor/checks/wiring_check.py",
}


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            first = n.body[0] if n.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _outside() -> list[tuple[str, ast.AST]]:
    out = []
    for p in sorted(PACKAGE.rglob("*.py")):
        rel = p.relative_to(PACKAGE.parent).as_posix()
        if not rel.startswith("inspector/engines/"):
            out.append((rel, ast.parse(p.read_text(encoding="utf-8"))))
    return out


def _compared(tree: ast.AST) -> list[ast.Constant]:
    """String constants compared with ==/in, used as dict keys, or passed to startswith."""
    found: list[ast.Constant] = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Compare):
            found += [
                c
                for side in (n.left, *n.comparators)
                for c in ast.walk(side)
                if isinstance(c, ast.Constant)
            ]
        elif isinstance(n, ast.Dict):
            found += [k for k in n.keys if isinstance(k, ast.Constant)]
        elif isinstance(n, ast.Call) and getattr(n.func, "attr", None) == "startswith":
            found += [a for a in n.args if isinstance(a, ast.Constant)]
    return [c for c in found if isinstance(c.value, str)]


def _names() -> set[str]:
    return {a.lower() for e in all_engines() for a in (e.id.value, e.display, *e.aliases)}


def test_no_module_outside_engines_compares_an_engine_name():
    names = _names()
    hits = [
        f"{rel}:{c.lineno}: {c.value!r}"
        for rel, tree in _outside()
        if rel not in NOT_ENGINES
        for c in _compared(tree)
        if c.value.lower() in names
    ]
    assert hits == []


def _release_pattern() -> re.Pattern[str]:
    versions = {r.version for e in all_engines() for r in e.releases}
    versions |= {str(vllm.CPU_WHEEL)}
    return re.compile(
        r"(?<![\w.])(" + "|".join(re.escape(v) for v in sorted(versions)) + r")(?![\w])"
    )


def test_no_module_outside_engines_writes_a_release():
    pattern = _release_pattern()
    hits = []
    for rel, tree in _outside():
        docs = _docstrings(tree)
        for n in ast.walk(tree):
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs:
                if pattern.search(n.value):
                    hits.append(f"{rel}:{n.lineno}: {n.value[:60]!r}")
    assert hits == []


# Words outside engines/ that spell an engine's name in prose, each with why it must stay: none.
# A report, a help text or an error names an engine through the registry (`Engine.X.display`,
# `.label`, `.says(key)`), so a rename or a release bump is one edit in inspector/engines/.
# Keys: (module, the constant's text).
SPELLED_ALLOWED: dict[tuple[str, str], str] = {}


def _spelled(tree: ast.AST) -> list[ast.Constant]:
    """String constants that are not docstrings (f-string parts included) and spell an engine's
    name as reports print it (its display name, from the registry) or one of its releases."""
    names = re.compile("|".join(re.escape(e.display) for e in all_engines()))
    releases = _release_pattern()
    docs = _docstrings(tree)
    return [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant)
        and isinstance(n.value, str)
        and id(n) not in docs
        and (names.search(n.value) or releases.search(n.value))
    ]


def test_no_module_outside_engines_spells_an_engine_name_or_release():
    found = {(rel, c.value): c.lineno for rel, tree in _outside() for c in _spelled(tree)}
    hits = [
        f"{rel}:{line}: {text[:70]!r}"
        for (rel, text), line in found.items()
        if (rel, text) not in SPELLED_ALLOWED
    ]
    assert hits == []
    assert set(SPELLED_ALLOWED) <= set(found)  # an allowance nothing needs any more goes


def test_the_spelling_check_sees_a_planted_name_and_release():
    planted = ast.parse(
        '"""The module names vLLM in its docstring."""\n'
        "def f(n):\n"
        '    """So may a function: SGLang."""\n'
        '    a = "served by llama.cpp"\n'
        '    b = f"{n} rounds under ONNX Runtime GenAI"\n'
        '    c = "as 0.5.23 counts"\n'
        '    d = f"{engine(Engine.VLLM).display} at {engine(Engine.VLLM).release}"\n'
        '    return "vllm-onehot", "sglang", a, b, c, d\n'
    )
    # the docstrings, the ids ("sglang") and the lookups through the registry (d) pass
    assert sorted(c.value for c in _spelled(planted)) == [
        " rounds under ONNX Runtime GenAI",
        "as 0.5.23 counts",
        "served by llama.cpp",
    ]
    # the names come from the registry: a new engine's name is caught with no edit here
    assert {e.display for e in all_engines()} >= {"vLLM", "SGLang", "llama.cpp"}


def test_the_checks_see_a_planted_comparison_and_release():
    tree = ast.parse('if log.engine == "sglang" or x in {"vLLM": 1}:\n    y = "SGLang 0.5.23"\n')
    assert {c.value for c in _compared(tree) if c.value.lower() in _names()} == {"sglang", "vLLM"}


def test_the_serving_config_says_the_dated_facts_where_such_a_target_is_named():
    from inspector.doctor.serving import engine_settings

    kimi = {"model_type": "kimi_k3", "architectures": ["KimiK3ForCausalLM"]}
    notes = engine_settings([2, 5, 8], last_layer=8, target=kimi).vllm.caveats
    assert any("50815" in n and "attn_res" in n for n in notes)
    assert any("46973" in n for n in notes)
    # not without the last layer's id, nor on a target the facts do not name
    assert not any(
        "50815" in n for n in engine_settings([2, 5, 7], last_layer=8, target=kimi).vllm.notes
    )
    llama = engine_settings([2, 5, 8], last_layer=8, target={"model_type": "llama"}).vllm.notes
    assert not any("46973" in n or "50815" in n for n in llama)


def _identity_checks(tree: ast.AST) -> list[int]:
    """Lines comparing against an `Engine.X` member (`is`, `==`, `in`): branching on which engine
    it is, where the engine's module should say what differs."""
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Compare):
            for side in (n.left, *n.comparators):
                for a in ast.walk(side):
                    if (
                        isinstance(a, ast.Attribute)
                        and isinstance(a.value, ast.Name)
                        and a.value.id == "Engine"
                        and a.attr.isupper()
                    ):
                        out.append(n.lineno)
    return out


def test_no_module_outside_engines_branches_on_which_engine_it_is():
    hits = [f"{rel}:{line}" for rel, tree in _outside() for line in _identity_checks(tree)]
    assert hits == []
    planted = ast.parse("if engine is Engine.SGLANG or x == Engine.VLLM:\n    pass\n")
    assert _identity_checks(planted) == [1, 1]


def test_release_order_and_refusal_in_words():
    assert not Release("0.32") < Release("0.32") and Release("0.32") <= Release("0.32")
    assert Release("0.32").at_least("0.32") and not Release("0.31").at_least("0.32")
    with pytest.raises(ValueError, match=r"release 'v0\.32': numbers and dots, or commit=True"):
        Release("v0.32")


def test_lookups_by_spelling_and_their_refusals():
    with pytest.raises(KeyError, match=r"unknown engine 'trt' \(vllm, sglang, llamacpp"):
        engine("trt")
    with pytest.raises(InputError) as e:
        parse_engine("sglng", True)
    assert e.value.message.endswith("; did you mean 'sglang'?")
    with pytest.raises(InputError) as e:
        parse_engine("zzzz", True)
    assert "did you mean" not in e.value.message
    assert [s.id for s in engines_named(["llama.cpp", "vLLM"])] == [Engine.VLLM, Engine.LLAMACPP]
    assert engines_named(None) == all_engines()


def test_each_engine_reads_a_config_by_its_first_row_and_captures_by_its_release_lines():
    from inspector.engines import capture_release, capture_releases

    assert engine(Engine.VLLM).primary_reader().tag == ""  # the V1 runner, not MRV2
    assert engine(Engine.LLAMACPP).primary_reader(gguf=True).gguf
    assert engine(Engine.SGLANG).primary_reader(gguf=True) is None
    keys = [c.key for c in capture_releases()]
    assert keys[:4] == ["vllm", "vllm-pre36063", "sglang", "sglang-pre25454"]
    assert capture_release("sglang").capture([1, 29, 57], "sglang", 61).hf_indices == (2, 30, 58)
    with pytest.raises(ValueError) as e:
        capture_release("trt")
    assert str(e.value) == "unknown engine 'trt' (vllm, vllm-pre36063, sglang, sglang-pre25454)"


def test_a_known_fault_applies_to_its_engine_build_device_and_temperature():
    (fault,) = engine(Engine.VLLM).known_faults
    assert fault.applies(Engine.VLLM, "cpu", "0.32.0", 0.7)
    assert not fault.applies(Engine.VLLM, "cpu", "0.32.0", 0.0)  # greedy skips the fault
    assert not fault.applies(Engine.VLLM, "cuda", "0.32.0", 0.7)
    assert not fault.applies(Engine.VLLM, "cpu", "0.33.0", 0.7)
    assert not fault.applies(Engine.SGLANG, "cpu", "0.32.0", 0.7)
