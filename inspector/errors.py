"""One error type for every malformed input, so each failure reads as one line."""

from __future__ import annotations

from pathlib import Path


class Setting(str):
    """A field that names a setting of the run (what the CLI takes as an option, the app as a
    dialog field), not a file's field. Below the views an error names the setting ("engine");
    each view words it: the CLI as its flag (`--engine`, `flag`), the app by its name."""

    @property
    def flag(self) -> str:
        return f"--{self}"


def setting_field(name: str) -> Setting:
    """The field of an error about the setting `name` ("engine", "fail-under")."""
    return Setting(name)


class InputError(ValueError):
    """A malformed or unusable input: names the file and the field at fault."""

    def __init__(self, path: str | Path | None, field: str | None, message: str) -> None:
        self.path = str(path) if path is not None else None
        self.field = field
        self.message = message
        # str(): the command line's words (a setting as its flag); the app asks `words()`
        super().__init__(self.words(flags=True))

    def words(self, *, flags: bool = False) -> str:
        """The one line, a setting worded as the CLI's flag where `flags`, else by its name."""
        field = self.field
        if flags and isinstance(field, Setting):
            field = field.flag
        return ": ".join([p for p in (self.path, field) if p] + [self.message])
