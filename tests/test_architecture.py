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
