"""Reading a GGUF file: gguf's GGUFReader made to fail in one line (a file cut short names the key
or tensor where it ends), and the `eagle3.` metadata as Python values.

The gguf package is imported on first use only, so nothing but a `.gguf` draft needs it; without
it the error says what to install. The file is memory-mapped read-only.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from inspector.errors import InputError
from inspector.formats.files import one_line

ARCH = "eagle3"
ARCH_KEY = "general.architecture"
INSTALL = "pip install 'eagle3-inspector[gguf]'"


def import_gguf(file: Path) -> Any:
    """The gguf package (and its quants), or one line naming what to install."""
    try:
        import gguf
        import gguf.quants  # noqa: F401
    except ImportError:
        raise InputError(
            file, None, f"reading a .gguf draft needs the gguf package: {INSTALL}"
        ) from None
    return gguf


class _PastEnd(Exception):
    """A read that would run past the end of the file."""

    def __init__(self, end: int) -> None:
        super().__init__(end)
        self.end = end


_READER: type | None = None


def _reader_class() -> type:
    """gguf's GGUFReader, made to refuse reads past the end of the file (numpy's memmap slices
    them short without a word) and to say where the file ends: after which key, in which
    tensor. Built on first use, so the gguf package is imported only for a GGUF."""
    global _READER
    if _READER is not None:
        return _READER
    from gguf import GGUFReader

    class Reader(GGUFReader):
        def __init__(self, path: Path) -> None:
            self._stage = "header"
            self._last: str | None = None
            super().__init__(path, "r")

        def _get(self, offset, dtype, count=1, override_order=None):  # type: ignore[override]
            end = int(offset) + int(np.dtype(dtype).itemsize) * int(count)
            if int(offset) < 0 or end > self.data.shape[0]:
                raise _PastEnd(end)
            return super()._get(offset, dtype, count, override_order)

        def _push_field(self, field, skip_sum=False):  # type: ignore[override]
            out = super()._push_field(field, skip_sum)
            if not field.name.startswith("GGUF."):
                self._stage, self._last = "metadata", field.name
            return out

        def _get_tensor_info_field(self, orig_offs):  # type: ignore[override]
            if self._stage != "tensor table":
                self._stage, self._last = "tensor table", None
            field = super()._get_tensor_info_field(orig_offs)
            self._last = field.name
            return field

        def _build_tensors(self, start_offs, fields):  # type: ignore[override]
            self._stage = "tensor data"
            built, seen = [], set()
            for field in fields:
                self._last = field.name
                if field.name in seen:
                    raise ValueError(f"a second tensor named {field.name!r}")
                seen.add(field.name)
                super()._build_tensors(start_offs, [field])
                built.extend(self.tensors)
            self.tensors = built

    _READER = Reader
    return Reader


def open_gguf(file: Path) -> Any:
    """The file read by gguf's GGUFReader (memory-mapped, read-only); errors as one line."""
    cls = _reader_class()
    reader = cls.__new__(cls)
    size = file.stat().st_size
    try:
        reader.__init__(file)
    except _PastEnd as e:
        stage, last = getattr(reader, "_stage", "header"), getattr(reader, "_last", None)
        if stage == "tensor data" and last:
            raise InputError(
                file,
                last,
                f"truncated: its data ends at byte {e.end}, past the end of the file ({size} bytes)",
            ) from None
        where = {
            "header": "in the GGUF header",
            "metadata": "in the metadata, after this key",
            "tensor table": "in the tensor table, after this tensor",
        }.get(stage, f"in the {stage}")
        raise InputError(file, last, f"truncated: the file ({size} bytes) ends {where}") from None
    except (ValueError, KeyError, IndexError, OverflowError, UnicodeDecodeError, OSError) as e:
        last = getattr(reader, "_last", None)
        what = one_line(str(e)) or type(e).__name__
        raise InputError(file, last, f"not a readable GGUF file: {what}") from None
    return reader


def field_value(field: Any) -> object:
    """A metadata value as Python: a str, int, float, bool, or a list of them (a nested array,
    which no key read here holds, as the text "a nested array", so a type check names it)."""
    from gguf import GGUFValueType

    types = list(field.types)
    if not types:
        return None
    if types[0] == GGUFValueType.ARRAY:
        if len(types) == 1:  # an empty array records no element type
            return []
        if types[-1] == GGUFValueType.ARRAY or len(types) > 2:
            return "a nested array"
        if types[-1] == GGUFValueType.STRING:
            return [bytes(field.parts[i]).decode("utf-8") for i in field.data]
        return [field.parts[i].tolist()[0] for i in field.data]
    if types[0] == GGUFValueType.STRING:
        return bytes(field.parts[-1]).decode("utf-8")
    return field.parts[-1].tolist()[0]


def metadata(reader: Any, file: Path) -> dict[str, object]:
    """The keys this reader uses (general.architecture and the `eagle3.` ones) as Python values.
    A FLOAT32 value becomes the shortest decimal that rounds to it (1e-05, not 9.99999974e-06),
    which is what the converter was given."""
    out: dict[str, object] = {}
    for key, field in reader.fields.items():
        if key != ARCH_KEY and not key.startswith(ARCH + "."):
            continue
        try:
            value = field_value(field)
        except UnicodeDecodeError:
            raise InputError(file, key, "not valid UTF-8") from None
        if isinstance(value, float) and str(field.types[-1].name) == "FLOAT32":
            value = f32_decimal(value)
        out[key] = value
    return out


def f32_decimal(value: float) -> float:
    """A float32 value as the shortest decimal that rounds to it (1e-05, not 9.99999974e-06)."""
    return float(str(np.float32(value))) if math.isfinite(value) else value
