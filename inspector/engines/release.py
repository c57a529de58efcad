"""An engine release as data: written once in the engine's module, compared as a version.

A release is either a version ("0.32", "0.5.23", compared number by number, so 0.5.23 < 0.5.100)
or a commit ("0c1e570", which has no order of its own: two commits compare equal only when they
are the same). `vendored_by` says which package ships a commit (llama.cpp inside
llama-cpp-python's sdist)."""

from __future__ import annotations

import re
from dataclasses import dataclass

_NUMBERS = re.compile(r"^\d+(\.\d+)*$")


@dataclass(frozen=True)
class Release:
    version: str
    commit: bool = False
    vendored_by: str = ""

    def __post_init__(self) -> None:
        if not self.commit and not _NUMBERS.match(self.version):
            raise ValueError(f"release {self.version!r}: numbers and dots, or commit=True")

    @property
    def key(self) -> tuple[int, ...]:
        if self.commit:
            raise TypeError(f"commit {self.version} has no version order")
        return tuple(int(p) for p in self.version.split("."))

    def __lt__(self, other: Release) -> bool:
        return self.key < other.key

    def __le__(self, other: Release) -> bool:
        return self.key <= other.key

    def at_least(self, version: str) -> bool:
        """Whether this release is `version` or newer ("0.32" at least "0.31.2")."""
        return self.key >= Release(version).key

    def __str__(self) -> str:
        return f"@{self.version}" if self.commit else self.version

    @property
    def words(self) -> str:
        """The release as a report writes it: "0.32", "@0c1e570 (llama-cpp-python 0.3.36)"."""
        return str(self) + (f" ({self.vendored_by})" if self.vendored_by else "")
