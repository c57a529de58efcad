"""One error type for every malformed input, so each failure reads as one line."""

from __future__ import annotations

from pathlib import Path


class InputError(ValueError):
    """A malformed or unusable input: names the file and the field at fault."""

    def __init__(self, path: str | Path | None, field: str | None, message: str) -> None:
        self.path = str(path) if path is not None else None
        self.field = field
        self.message = message
        parts = [p for p in (self.path, self.field) if p]
        super().__init__(": ".join([*parts, message]))
