"""The layering rules of docs/architecture.md, checked on the package's source: no module imports
one that imports it back (type-only and function-level imports count: a cycle behind
TYPE_CHECKING is still two modules that cannot be read apart), no module over 500 lines, no
underscore name imported from another module."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "inspector"
MAX_LINES = 500


def _modules() -> dict[str, Path]:
    out = {}
    for p in PACKAGE.rglob("*.py"):
        parts = p.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = p
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> list[tuple[str, str | None]]:
    """(module imported, the name taken from it or None) for every import in the file."""
    out: list[tuple[str, str | None]] = []
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            for a in node.names:
                sub = f"{mod}.{a.name}"
                out.append((sub, None) if sub in MODULES else (mod, a.name))
    return out


def _graph() -> dict[str, set[str]]:
    return {
        m: {t for t, _ in _imports(m, p) if t in MODULES and t != m} for m, p in MODULES.items()
    }


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_checker_sees_a_cycle_and_a_package():
    # the checker itself: a two-module cycle is found, a chain is not
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
    assert "inspector.model" in MODULES and "inspector.model.decoder" in MODULES
    assert "inspector.model.decoder" in _graph()["inspector.model"]


def test_no_module_imports_one_that_imports_it_back():
    assert _cycles(_graph()) == []


def test_no_module_is_over_500_lines():
    long = {m: n for m, p in MODULES.items() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_no_private_name_is_imported_across_modules():
    private = [
        (m, t, n)
        for m, p in MODULES.items()
        for t, n in _imports(m, p)
        if t in MODULES and n and n.startswith("_") and not n.startswith("__")
    ]
    assert private == []


# The layers of docs/architecture.md, lowest first: a module may import its own layer and those
# below it, never one above. Top-level names of the package (`inspector.<name>`).
LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    (
        "shared leaves",
        frozenset(
            {
                "errors",
                "progress",
                "strict_json",
                "input_folders",
                "stats",
                "engines",
                "demo_paths",
                "formatting",
                "cache",
                "memory",
            }
        ),
    ),
    ("inputs", frozenset({"sample", "draft", "formats"})),
    ("forward, wiring", frozenset({"model", "wiring"})),
    ("engine", frozenset({"metrics", "evaluate"})),
    ("capture", frozenset({"capture"})),
    ("serving", frozenset({"serving", "distributed"})),
    ("diagnoses", frozenset({"doctor"})),
    ("session", frozenset({"session"})),
    (
        "views and tools",
        frozenset(
            {"cli", "commands", "tui", "export", "reference_pages", "__main__", "demo", "synthetic"}
        ),
    ),
)
# No admitted exception: the rounds walk the engine's eval reads lives in `metrics.rounds`, and the
# engines' facts in `engines`, a leaf below every layer.
EXCEPTIONS: frozenset[tuple[str, str]] = frozenset()


def _rank(module: str) -> int | None:
    """The layer of `inspector.<top>...`; None for the package itself (its __init__ re-exports)."""
    parts = module.split(".")
    if len(parts) < 2:
        return None
    for i, (_, names) in enumerate(LAYERS):
        if parts[1] in names:
            return i
    raise AssertionError(
        f"{module}: in no layer of LAYERS (add it where docs/architecture.md says)"
    )


def _upward(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Every import of a module in a higher layer, the admitted exceptions left out."""
    out = []
    for m, deps in graph.items():
        rm = _rank(m)
        for d in deps:
            rd = _rank(d)
            if rm is None or rd is None or rd <= rm:
                continue
            # an exception admits the walk's own imports too (its module, whatever serving holds)
            if (m, d) in EXCEPTIONS:
                continue
            out.append((m, d))
    return sorted(out)


def test_every_module_is_in_a_layer():
    for m in MODULES:
        _rank(m)


def test_no_module_imports_a_higher_layer():
    assert _upward(_graph()) == []


def test_the_layer_check_sees_a_planted_import():
    """A lower layer importing a higher one fails: the forward importing the doctor, the inputs
    importing a view, the engine reading the serving layer, and the engines' facts reading the
    doctor."""
    graph = {m: set(d) for m, d in _graph().items()}
    graph["inspector.model.forward"].add("inspector.doctor.reconcile.settle")
    graph["inspector.formats.engine_log"].add("inspector.commands.reconcile")
    graph["inspector.evaluate.evaluator"].add("inspector.serving.replay")
    graph["inspector.engines.vllm"].add("inspector.doctor.wiring.engine_reading")
    assert _upward(graph) == [
        ("inspector.engines.vllm", "inspector.doctor.wiring.engine_reading"),
        ("inspector.evaluate.evaluator", "inspector.serving.replay"),
        ("inspector.formats.engine_log", "inspector.commands.reconcile"),
        ("inspector.model.forward", "inspector.doctor.reconcile.settle"),
    ]
