"""Reading tensors from safetensors (single or sharded) and torch .bin files, safely.

Every file is checked before it is read: a regular file (never a FIFO or a device), declared sizes
that fit what is stored (see `inspector.formats.headers`), and for a sharded index, shard paths
that stay inside the checkpoint folder. torch files are loaded with `weights_only=True` only.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from inspector.errors import InputError
from inspector.formats.files import check_regular, read_json, strip_torch_advice
from inspector.formats.headers import TensorHeader, check_torch_zip, safetensors_header

__all__ = [
    "WEIGHT_FILES",
    "find_weight_file",
    "load_torch_file",
    "read_json",
    "read_safetensors",
    "read_tensors",
    "shard_map",
    "tensor_headers",
    "tensor_names",
]

WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


def find_weight_file(folder: Path) -> Path:
    """The weight file (or index) of a checkpoint folder, by the names trainers save under."""
    for name in WEIGHT_FILES:
        if (folder / name).exists():
            check_regular(folder / name)
            return folder / name
    singles = sorted(p for p in folder.glob("*.safetensors") if p.is_file())
    if len(singles) == 1:
        return singles[0]
    raise InputError(folder, None, f"no weights found (looked for {', '.join(WEIGHT_FILES)})")


def shard_map(index_path: Path) -> dict[str, Path]:
    """Tensor name -> shard file from a `*.index.json`; every shard inside the index's folder.

    A shard may be a symlink (the Hugging Face cache links shards into a blob store), but the
    path the index names may not climb out of the folder (`../x`, `/abs/x`, a symlinked folder).
    """
    weight_map = read_json(index_path).get("weight_map")
    if not isinstance(weight_map, dict):
        raise InputError(
            index_path, "weight_map", "missing or not an object of tensor name -> shard file"
        )
    folder = index_path.parent
    inside = folder.resolve()
    shards: dict[str, Path] = {}
    resolved: dict[str, bool] = {}
    for name, shard in weight_map.items():
        field = f"weight_map[{name}]"
        if not isinstance(shard, str) or not shard or "\0" in shard:
            raise InputError(index_path, field, "expected a shard file name")
        norm = os.path.normpath(shard)
        if shard not in resolved:
            parent = (folder / norm).parent.resolve()
            resolved[shard] = not os.path.isabs(norm) and (
                parent == inside or inside in parent.parents
            )
        if not resolved[shard]:
            raise InputError(index_path, field, f"{shard!r} lies outside the checkpoint folder")
        shards[name] = folder / norm
    return shards


def _existing_shard(index_path: Path, shard: Path) -> Path:
    if not shard.exists():
        raise InputError(shard, None, f"shard named by {index_path.name} is missing")
    return shard


def load_torch_file(path: Path) -> object:
    """torch.load restricted to tensors and plain containers: never runs pickled code.

    The archive's records are checked first (uncompressed, declared sizes = stored sizes), so
    loading (memory-mapped) costs no more memory than the file holds.
    """
    check_torch_zip(path)
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as e:  # noqa: BLE001 - any failure is a bad input file
        raise InputError(path, None, f"unsafe or unreadable: {strip_torch_advice(str(e))}") from e


def read_safetensors(path: Path, names: list[str] | None = None) -> dict[str, torch.Tensor]:
    """The named tensors (all when None) of one safetensors file, its header checked first."""
    from safetensors import safe_open

    headers = safetensors_header(path)
    for n in names or ():
        if n not in headers:
            raise InputError(path, n, "tensor not found")
    out: dict[str, torch.Tensor] = {}
    try:
        with safe_open(str(path), framework="pt") as f:
            for name in names if names is not None else list(headers):
                out[name] = f.get_tensor(name)
    except Exception as e:  # noqa: BLE001 - safetensors raises several types
        raise InputError(path, None, f"not a readable safetensors file: {e}") from e
    return out


def tensor_headers(
    weight_file: Path, names: list[str] | None = None
) -> dict[str, TensorHeader] | None:
    """Declared dtype and shape of the named tensors (all when None), without reading data;
    None for torch files. Of a sharded index, only the shards holding those tensors are opened."""
    if weight_file.name.endswith(".index.json"):
        shards = shard_map(weight_file)
        wanted = [n for n in (names if names is not None else shards) if n in shards]
        if not all(shards[n].suffix == ".safetensors" for n in wanted):
            return None
        out: dict[str, TensorHeader] = {}
        for shard in sorted({shards[n] for n in wanted}):
            out.update(safetensors_header(_existing_shard(weight_file, shard)))
        return {n: out[n] for n in wanted if n in out}
    if weight_file.suffix == ".safetensors":
        return safetensors_header(weight_file)
    return None


def tensor_names(weight_file: Path) -> list[str]:
    """Names stored in a weight file (or its shards), without reading the data."""
    if weight_file.name.endswith(".index.json"):
        return list(shard_map(weight_file))
    if weight_file.suffix == ".safetensors":
        return list(safetensors_header(weight_file))
    return list(_torch_state(weight_file))


def _torch_state(path: Path) -> dict[str, torch.Tensor]:
    state = load_torch_file(path)
    if not isinstance(state, dict):
        raise InputError(path, None, "expected a dict of tensors")
    if "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    return {k: v for k, v in state.items() if isinstance(k, str) and isinstance(v, torch.Tensor)}


def read_tensors(weight_file: Path, names: list[str] | None = None) -> dict[str, torch.Tensor]:
    """Read the named tensors (all when None) from a single file or a sharded index.

    Sharded safetensors are opened lazily, so reading one tensor of a 100 GB target reads only it.
    """
    if weight_file.name.endswith(".index.json"):
        shard_of = shard_map(weight_file)
        wanted = names if names is not None else list(shard_of)
        by_shard: dict[Path, list[str]] = {}
        for n in wanted:
            if n not in shard_of:
                raise InputError(weight_file, n, "not in weight_map")
            by_shard.setdefault(shard_of[n], []).append(n)
        out: dict[str, torch.Tensor] = {}
        for shard, shard_names in by_shard.items():
            _existing_shard(weight_file, shard)
            if shard.suffix == ".safetensors":
                out.update(read_safetensors(shard, shard_names))
            else:
                state = _torch_state(shard)
                for n in shard_names:
                    if n not in state:
                        raise InputError(shard, n, f"tensor named by {weight_file.name} not found")
                out.update({n: state[n] for n in shard_names})
        return out
    if weight_file.suffix == ".safetensors":
        return read_safetensors(weight_file, names)
    state = _torch_state(weight_file)
    if names is None:
        return state
    for n in names:
        if n not in state:
            raise InputError(weight_file, n, "tensor not found")
    return {n: state[n] for n in names}
