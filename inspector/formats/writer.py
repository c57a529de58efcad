"""Writing a draft checkpoint folder: one plan (`DraftFiles`), one writer (`write_draft`).

What every writer of a checkpoint must get right, kept in one place:
- OUT is a new folder: never inside an input folder (the checkpoint, the samples, the target...),
  never an existing non-empty folder, and a path that cannot be written is one InputError.
- No partial OUT, ever: everything is written into a hidden sibling folder that is renamed to
  OUT at the end; a failure removes it, so a retry finds nothing in its way.
- Tensors that share memory (tied weights, views into one buffer, as a `pytorch_model.bin` can
  hold them) are cloned: safetensors stores each tensor's bytes once.
- Side files (tokenizer, generation config...) are copied only when they are regular files in the
  checkpoint folder, or links to files inside it; a link leading out of the folder is not followed.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file

from inspector.errors import InputError
from inspector.formats.files import one_line, os_text
from inspector.input_folders import enclosing_input

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt")


@dataclass(frozen=True)
class DraftFiles:
    """Everything a draft checkpoint folder holds, ready to be written by `write_draft`."""

    config: dict  # config.json, written with indent 2 in this dict's key order
    tensors: dict[str, torch.Tensor]  # model.safetensors, under these names
    side_files: tuple[Path, ...] = ()  # copied byte for byte under their own names
    sort_keys: bool = False  # config.json with every object's keys sorted


def side_files(folder: str | Path) -> tuple[Path, ...]:
    """The files of a checkpoint folder a rewritten checkpoint should carry along: regular files
    other than config.json and weights, or links to such files inside the folder."""
    folder = Path(folder)
    inside = folder.resolve()
    out = []
    for f in sorted(folder.iterdir()):
        if f.name == CONFIG_FILE or f.suffix in WEIGHT_SUFFIXES or f.name.endswith(".index.json"):
            continue
        if _regular_inside(f, inside):
            out.append(f)
    return tuple(out)


def _regular_inside(f: Path, inside: Path) -> bool:
    real = f.resolve()
    return real.is_file() and real.parent == inside and not f.name.startswith(".")


def check_out(
    out: str | Path, inputs: Iterable[str | Path | None] = (), field: str | None = None
) -> Path:
    """OUT resolved, once it is known to be a new (or empty) folder outside every input folder."""
    if not str(out).strip():
        raise InputError(None, field, "an empty path: name the new folder to write")
    try:
        target = Path(out).resolve()
        exists = target.exists()
    except (OSError, ValueError) as e:
        raise InputError(
            one_line(str(out)), field, f"not a usable path: {one_line(str(e))}"
        ) from None
    folder = enclosing_input(target, inputs)
    if folder is not None:
        raise InputError(out, field, f"must be a new folder outside the input folder {folder}")
    if exists and not target.is_dir():
        raise InputError(out, field, "exists and is not a folder")
    if exists and any(target.iterdir()):
        raise InputError(out, field, "exists and is not empty: a new folder is needed")
    return target


def _storage_safe(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """CPU, contiguous tensors that each own their memory (shared or partial storages cloned)."""
    seen: set[int] = set()
    out: dict[str, torch.Tensor] = {}
    for name, t in tensors.items():
        t = t.detach().cpu()
        storage = t.untyped_storage()
        whole = storage.nbytes() == t.numel() * t.element_size()
        ptr = storage.data_ptr()
        if not t.is_contiguous() or not whole or (ptr and ptr in seen):
            t = t.clone(memory_format=torch.contiguous_format)
            ptr = t.untyped_storage().data_ptr()
        seen.add(ptr)
        out[name] = t
    return out


def write_draft(
    plan: DraftFiles,
    out: str | Path,
    *,
    inputs: Iterable[str | Path | None] = (),
    field: str | None = None,
) -> Path:
    """Write `plan` as the new checkpoint folder `out`; returns its path.

    `inputs`: every file, folder or glob the run read (OUT may lie in none of their folders);
    `field`: the option that named OUT, for error messages (e.g. "--write-fixed").
    """
    target = check_out(out, inputs, field)
    tensors = _storage_safe(plan.tensors)
    for f in plan.side_files:
        if not _regular_inside(f, f.parent.resolve()) or f.name in (CONFIG_FILE, WEIGHTS_FILE):
            raise InputError(f, None, "not a regular file of the checkpoint folder: not copied")
    created = _make_parents(target, out, field)
    tmp = target.parent / f".{target.name}.{secrets.token_hex(4)}.partial"
    try:
        tmp.mkdir()
        save_file(tensors, str(tmp / WEIGHTS_FILE), metadata={"format": "pt"})
        text = json.dumps(plan.config, indent=2, sort_keys=plan.sort_keys) + "\n"
        (tmp / CONFIG_FILE).write_text(text)
        for f in plan.side_files:
            shutil.copyfile(f, tmp / f.name)
        os.rename(tmp, target)  # replaces an empty OUT folder; fails on a non-empty one
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        for d in reversed(created):
            _rmdir_quietly(d)
        if isinstance(e, OSError):
            raise InputError(out, field, f"cannot write: {os_text(e)}") from None
        raise
    return target


def _make_parents(target: Path, out: str | Path, field: str | None) -> list[Path]:
    """Create OUT's missing parent folders; the ones created, outermost first."""
    missing = [p for p in reversed(target.parents) if not p.exists()]
    try:
        for p in missing:
            p.mkdir()
    except OSError as e:
        for p in reversed(missing):
            _rmdir_quietly(p)
        raise InputError(out, field, f"cannot create: {os_text(e)}") from None
    return missing


def _rmdir_quietly(p: Path) -> None:
    try:
        p.rmdir()
    except OSError:
        pass
