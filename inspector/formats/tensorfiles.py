"""Reading tensors from safetensors (single or sharded) and torch .bin files, safely."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from inspector.errors import InputError

WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


def find_weight_file(folder: Path) -> Path:
    for name in WEIGHT_FILES:
        if (folder / name).is_file():
            return folder / name
    singles = sorted(folder.glob("*.safetensors"))
    if len(singles) == 1:
        return singles[0]
    raise InputError(folder, None, f"no weights found (looked for {', '.join(WEIGHT_FILES)})")


def _shard_map(index_path: Path) -> dict[str, Path]:
    try:
        index = json.loads(index_path.read_text())
        weight_map = index["weight_map"]
    except (OSError, ValueError) as e:
        raise InputError(index_path, None, f"unreadable index: {e}") from e
    except (KeyError, TypeError) as e:
        raise InputError(index_path, "weight_map", "missing") from e
    return {k: index_path.parent / v for k, v in weight_map.items()}


def load_torch_file(path: Path) -> dict:
    """torch.load restricted to tensors and plain containers: never runs pickled code."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except RuntimeError:
        # mmap needs the zipfile format; legacy files load without it.
        try:
            return torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001 - any failure is a bad input file
            raise InputError(path, None, f"cannot load with weights_only=True: {e}") from e
    except Exception as e:  # noqa: BLE001
        raise InputError(path, None, f"cannot load with weights_only=True: {e}") from e


def _safetensors_names(path: Path) -> list[str]:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            return list(f.keys())
    except Exception as e:  # noqa: BLE001 - safetensors raises several types
        raise InputError(path, None, f"not a readable safetensors file: {e}") from e


def _read_safetensors(path: Path, names: list[str] | None = None) -> dict[str, torch.Tensor]:
    from safetensors import safe_open

    out: dict[str, torch.Tensor] = {}
    try:
        with safe_open(str(path), framework="pt") as f:
            for name in names if names is not None else list(f.keys()):
                out[name] = f.get_tensor(name)
    except InputError:
        raise
    except Exception as e:  # noqa: BLE001
        raise InputError(path, None, f"not a readable safetensors file: {e}") from e
    return out


def tensor_names(weight_file: Path) -> list[str]:
    """Names stored in a weight file (or its shards), without reading the data."""
    if weight_file.name.endswith(".index.json"):
        return list(_shard_map(weight_file))
    if weight_file.suffix == ".safetensors":
        return _safetensors_names(weight_file)
    return list(_torch_state(weight_file))


def _torch_state(path: Path) -> dict[str, torch.Tensor]:
    state = load_torch_file(path)
    if not isinstance(state, dict):
        raise InputError(path, None, "expected a dict of tensors")
    if "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    return {k: v for k, v in state.items() if isinstance(v, torch.Tensor)}


def read_tensors(weight_file: Path, names: list[str] | None = None) -> dict[str, torch.Tensor]:
    """Read the named tensors (all when None) from a single file or a sharded index.

    Sharded safetensors are opened lazily, so reading one tensor of a 100 GB target reads only it.
    """
    if weight_file.name.endswith(".index.json"):
        shard_of = _shard_map(weight_file)
        wanted = names if names is not None else list(shard_of)
        by_shard: dict[Path, list[str]] = {}
        for n in wanted:
            if n not in shard_of:
                raise InputError(weight_file, n, "not in weight_map")
            by_shard.setdefault(shard_of[n], []).append(n)
        out: dict[str, torch.Tensor] = {}
        for shard, shard_names in by_shard.items():
            if not shard.is_file():
                raise InputError(shard, None, f"shard named by {weight_file.name} is missing")
            if shard.suffix == ".safetensors":
                out.update(_read_safetensors(shard, shard_names))
            else:
                state = _torch_state(shard)
                out.update({n: state[n] for n in shard_names})
        return out
    if weight_file.suffix == ".safetensors":
        if names is not None:
            present = set(_safetensors_names(weight_file))
            missing = [n for n in names if n not in present]
            if missing:
                raise InputError(weight_file, missing[0], "tensor not found")
        return _read_safetensors(weight_file, names)
    state = _torch_state(weight_file)
    if names is None:
        return state
    for n in names:
        if n not in state:
            raise InputError(weight_file, n, "tensor not found")
    return {n: state[n] for n in names}


def read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as e:
        raise InputError(path, None, "file not found") from e
    except (OSError, ValueError) as e:
        raise InputError(path, None, f"not valid JSON: {e}") from e
    if not isinstance(data, dict):
        raise InputError(path, None, "expected a JSON object")
    return data
