"""Opening input files defensively: regular files only, bounded JSON, one-line error texts.

Every reader in `inspector.formats` goes through these helpers, so a FIFO, a device or a symlink to
`/dev/zero` given as a config, a weight file or a sample is refused before a byte is read (reading a
FIFO blocks forever; reading `/dev/zero` never ends), and a JSON file can never be larger than a
few tens of megabytes.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

from inspector.errors import InputError

# config.json, an index json, data_config.json and tokenizer.json are all far below this (the
# largest public tokenizer.json files are ~35 MB); anything larger is not one of them.
MAX_JSON_BYTES = 64 * 1024 * 1024


def file_kind(mode: int) -> str:
    """A short name for what a non-regular path is, for error messages."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def check_regular(path: str | Path, field: str | None = None) -> int:
    """The size of `path` when it is (or links to) a regular file; InputError otherwise.

    Symlinks to regular files are fine (the Hugging Face cache links every file into a blob
    store); what they point to must be a regular file.
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputError(path, field, "file not found") from None
    except (OSError, ValueError) as e:
        raise InputError(path, field, f"cannot read: {os_text(e)}") from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(path, field, f"is {file_kind(st.st_mode)}, not a regular file")
    return st.st_size


def read_bytes(path: str | Path, limit: int, field: str | None = None) -> bytes:
    """The bytes of a regular file of at most `limit` bytes (checked before and while reading)."""
    size = check_regular(path, field)
    if size > limit:
        raise InputError(path, field, f"{size} bytes: larger than the {limit} bytes allowed")
    try:
        # O_NONBLOCK: if the file was swapped for a FIFO after the check, open does not block.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise InputError(path, field, "not a regular file")
            data = f.read(limit + 1)
    except OSError as e:
        raise InputError(path, field, f"cannot read: {os_text(e)}") from None
    if len(data) > limit:
        raise InputError(path, field, f"larger than the {limit} bytes allowed")
    return data


def read_json(path: str | Path, limit: int = MAX_JSON_BYTES) -> dict:
    """A JSON object from a regular file of bounded size."""
    data = read_bytes(path, limit)
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError) as e:  # RecursionError: absurdly deep nesting
        raise InputError(path, None, f"not valid JSON: {one_line(str(e))}") from None
    if not isinstance(obj, dict):
        raise InputError(path, None, "expected a JSON object")
    return obj


# Sentences of torch's load errors that advise disabling the safe loader, or point at its docs:
# the inspector never loads with weights_only=False, and a malicious file must not be invited in.
_ADVICE = re.compile(
    r"weights_only|re-running|trusted source|documentation|file an issue|in pytorch 2\.6",
    re.IGNORECASE,
)


def os_text(e: BaseException) -> str:
    """An OS error's own words ("Permission denied"), without the errno prefix, on one line."""
    return one_line(getattr(e, "strerror", None) or str(e))


def one_line(text: str) -> str:
    """Collapse a message to one line with control characters escaped."""
    flat = " ".join(text.split())
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in flat)


def strip_torch_advice(text: str) -> str:
    """torch.load's error text without its advice to re-run with weights_only=False, one line."""
    sentences = re.split(r"(?<=[.!?])\s+|\n+", text)
    kept = [s.strip() for s in sentences if s.strip() and not _ADVICE.search(s)]
    return one_line(" ".join(kept)) or "refused by the safe loader"
