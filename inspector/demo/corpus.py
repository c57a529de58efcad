"""The demo's text: the Python standard library's own ``.py`` sources.

Every Python install has them, so the demo needs no download. The file list is sorted and the split
is by file position, so the same Python version always yields the same documents.
"""

from __future__ import annotations

import sysconfig
from dataclasses import dataclass
from pathlib import Path

# Test suites are huge, repetitive and contain deliberately odd encodings; the library proper is
# the better "language" for a small model.
_SKIP_DIRS = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}

# Documents longer than this are cut into pieces, so one giant file cannot dominate a split.
DOC_CHARS = 6000


@dataclass(frozen=True)
class Corpus:
    """Documents split by file: ``train`` for the target, ``held`` for evaluation and prompts."""

    train: list[str]
    held: list[str]
    n_files: int


def stdlib_files(root: Path | None = None) -> list[Path]:
    """All ``.py`` files under the stdlib directory (minus tests), in sorted order."""
    root = Path(root or sysconfig.get_paths()["stdlib"])
    files = [
        p for p in root.rglob("*.py") if not (_SKIP_DIRS & set(p.relative_to(root).parts[:-1]))
    ]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def split_documents(text: str, max_chars: int = DOC_CHARS) -> list[str]:
    """Cut one file into documents at blank lines, each at most about ``max_chars`` long."""
    docs: list[str] = []
    cur: list[str] = []
    size = 0
    for block in text.split("\n\n"):
        if cur and size + len(block) > max_chars:
            docs.append("\n\n".join(cur))
            cur, size = [], 0
        cur.append(block)
        size += len(block) + 2
    if cur:
        docs.append("\n\n".join(cur))
    return [d for d in docs if d.strip()]


def load_corpus(
    files: list[Path] | None = None, held_every: int = 10, max_files: int | None = None
) -> Corpus:
    """Read the files and split them into documents; every ``held_every``-th file is held out.

    Splitting by file (not by document) keeps near-duplicate neighbouring text out of the held set.
    """
    files = stdlib_files() if files is None else list(files)
    if max_files is not None:
        files = files[:max_files]
    train: list[str] = []
    held: list[str] = []
    for i, path in enumerate(files):
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        docs = split_documents(text)
        (held if i % held_every == held_every - 1 else train).extend(docs)
    return Corpus(train=train, held=held, n_files=len(files))
