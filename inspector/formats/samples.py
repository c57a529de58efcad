"""Saved training samples of every public trainer, loaded lazily into canonical `Sample`s.

- speculators v1 `.pt`: {"input_ids", "hidden_states": [T,H] x S, "loss_mask"}; the last slot is the
  verifier's last (pre-norm) state. `data_config.json` gives the slots' layer ids.
- speculators v0 `.pt`: {"input_ids", "loss_mask", "hidden_state": [T, 3H], "target": [T, H]}.
- SpecForge `.ckpt`: {"input_ids", "loss_mask", "hidden_state": [1,T,H] post-norm,
  "aux_hidden_state": [1,T,N*H]}.
- speculators v2 `hs_{i}.safetensors`: {"hidden_states": [T, n, H], "token_ids": [T]}, loss mask from
  the Arrow dataset beside it when pyarrow is installed, else all ones (with a warning).
"""

from __future__ import annotations

import glob
import re
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch

from inspector.errors import InputError
from inspector.formats.tensorfiles import load_torch_file, read_json
from inspector.sample import Sample, SlotInfo

SAMPLE_SUFFIXES = (".pt", ".ckpt", ".safetensors")


def _natural_key(p: Path) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(p))]


def discover(spec: str | Path | Sequence[str | Path]) -> list[Path]:
    """Sample files from a folder (recursively), a glob, a file, or a list of those."""
    specs = [spec] if isinstance(spec, str | Path) else list(spec)
    files: list[Path] = []
    for s in specs:
        p = Path(s)
        if p.is_dir():
            found = [f for f in p.rglob("*") if f.suffix in SAMPLE_SUFFIXES and f.is_file()]
            found = [f for f in found if f.name != "model.safetensors"]
            files.extend(sorted(found, key=_natural_key))
        elif p.is_file():
            files.append(p)
        elif any(c in str(s) for c in "*?["):
            files.extend(
                sorted((Path(f) for f in glob.glob(str(s), recursive=True)), key=_natural_key)
            )
        else:
            raise InputError(s, None, "no such file or folder")
    if not files:
        raise InputError(
            ", ".join(map(str, specs)), None, "no sample files found (.pt, .ckpt, hs_*.safetensors)"
        )
    return files


POST_NORM = "post-norm"  # a layer_ids entry for the target's final norm output


def _labels_from_layer_ids(ids: list[int | None]) -> list[SlotInfo]:
    return [
        SlotInfo("final(post-norm)", post_norm=True)
        if i is None
        else SlotInfo("embed" if i == 0 else f"L{i}", hf_index=i)
        for i in ids
    ]


def read_data_config(sample_file: Path) -> tuple[list[int | None] | None, Path | None]:
    """HF indices of the slots, from a data_config.json beside the samples (or one folder up).

    speculators v1 writes `hidden_states.layer_ids` as decoder-layer output ids (HF index = id + 1);
    a file stating `"index_convention": "hf"` holds HF indices already, and may name the target's
    final norm output as `"post-norm"` (returned as None).
    """
    for folder in (sample_file.parent, sample_file.parent.parent):
        path = folder / "data_config.json"
        if not path.is_file():
            continue
        cfg = read_json(path)
        hs = cfg.get("hidden_states") if isinstance(cfg.get("hidden_states"), dict) else cfg
        ids = hs.get("layer_ids")
        if ids is None:
            return None, path
        convention = hs.get("index_convention", cfg.get("index_convention", "speculators"))
        if not isinstance(ids, list) or not all(
            isinstance(i, int) or (convention == "hf" and i == POST_NORM) for i in ids
        ):
            raise InputError(path, "hidden_states.layer_ids", "expected a list of integers")
        if convention == "hf":
            return [None if i == POST_NORM else i for i in ids], path
        return [i + 1 for i in ids], path
    return None, None


def _tensor(path: Path, data: dict, key: str) -> torch.Tensor:
    if key not in data:
        raise InputError(path, key, "missing")
    t = data[key]
    if not isinstance(t, torch.Tensor):
        raise InputError(path, key, f"expected a tensor, got {type(t).__name__}")
    return t


def _ids(path: Path, data: dict, key: str) -> torch.Tensor:
    t = _tensor(path, data, key).squeeze()
    if t.dim() != 1 or t.is_floating_point() or t.numel() < 3:
        raise InputError(
            path, key, f"expected integer ids [T] with T >= 3, got shape {tuple(t.shape)}"
        )
    return t.long()


def _mask(path: Path, data: dict, n: int, key: str = "loss_mask") -> torch.Tensor:
    t = _tensor(path, data, key).squeeze().long()
    if t.dim() != 1 or t.numel() != n:
        raise InputError(path, key, f"shape {tuple(t.shape)}, expected [{n}]")
    return t


def _slots_2d(path: Path, key: str, t: torch.Tensor, n: int) -> torch.Tensor:
    if t.dim() == 3 and t.shape[0] == 1:
        t = t[0]
    if t.dim() != 2 or t.shape[0] != n:
        raise InputError(path, key, f"shape {tuple(t.shape)}, expected [{n}, hidden]")
    if not t.is_floating_point():
        raise InputError(path, key, f"dtype {t.dtype}, expected a floating type")
    return t


def detect_format(path: Path, data: dict | None) -> str:
    if path.suffix == ".safetensors":
        return "speculators-v2"
    if data is None or not isinstance(data, dict):
        raise InputError(path, None, "expected a dict of tensors")
    if "hidden_states" in data and isinstance(data["hidden_states"], list | tuple):
        return "speculators-v1"
    if "aux_hidden_state" in data:
        return "specforge"
    if "hidden_state" in data and "target" in data:
        return "speculators-v0"
    keys = ", ".join(sorted(map(str, data)))
    raise InputError(path, None, f"unknown sample layout (keys: {keys})")


def _slot_info_for(
    fmt: str, n_slots: int, layer_ids: list[int | None] | None, path: Path
) -> list[SlotInfo]:
    if fmt == "specforge":
        n_aux = n_slots - 1
        if layer_ids is not None and len(layer_ids) == n_aux:
            base = _labels_from_layer_ids(layer_ids)
        else:
            base = [SlotInfo(f"aux{i}") for i in range(n_aux)]
        return [*base, SlotInfo("final(post-norm)", post_norm=True, verifier=True)]
    if layer_ids is not None and len(layer_ids) != n_slots:
        raise InputError(
            path,
            "hidden_states",
            f"{n_slots} slots but data_config.json names {len(layer_ids)} layer ids",
        )
    infos = (
        _labels_from_layer_ids(layer_ids)
        if layer_ids
        else [SlotInfo(f"s{i}") for i in range(n_slots)]
    )
    if fmt == "speculators-v0" and not layer_ids:
        infos[-1] = SlotInfo("target")
    # speculators (v0/v1/v2) keep the verifier's last pre-norm state as the final slot.
    last = infos[-1]
    infos[-1] = SlotInfo(last.label, last.hf_index, post_norm=last.post_norm, verifier=True)
    return infos


def _v2_rows(folder: Path) -> dict[int, tuple[torch.Tensor | None, torch.Tensor]] | None:
    """(input_ids, loss_mask) per dataset row from the speculators v2 Arrow dataset (the one
    `datasets.save_to_disk` writes beside `hidden_states/`); None when absent or pyarrow is missing.
    """
    try:
        import pyarrow.ipc as ipc  # optional: only speculators v2 datasets need it
    except ImportError:
        return None
    for base in (folder, folder.parent):
        arrows = sorted(base.glob("*.arrow"), key=_natural_key)
        if not arrows:
            continue
        rows: dict[int, tuple[torch.Tensor | None, torch.Tensor]] = {}
        for f in arrows:
            try:
                with open(f, "rb") as fh:
                    table = ipc.open_stream(fh).read_all()
            except Exception as e:  # noqa: BLE001 - pyarrow raises several types
                raise InputError(f, None, f"unreadable Arrow file: {e}") from e
            if "loss_mask" not in table.column_names:
                raise InputError(f, "loss_mask", "column missing")
            ids = (
                table.column("input_ids").to_pylist() if "input_ids" in table.column_names else None
            )
            for i, m in enumerate(table.column("loss_mask").to_pylist()):
                row_ids = torch.tensor(ids[i], dtype=torch.long) if ids is not None else None
                rows[len(rows)] = (row_ids, torch.tensor(m, dtype=torch.long))
        return rows
    return None


def load_sample(
    path: Path, layer_ids: list[int | None] | None = None, *, v2_rows: dict | None = None
) -> Sample:
    """Load one sample file into a canonical Sample."""
    path = Path(path)
    if not path.is_file():
        raise InputError(path, None, "file not found")
    warnings: list[str] = []
    if path.suffix == ".safetensors":
        from safetensors import safe_open

        try:
            with safe_open(str(path), framework="pt") as f:
                data = {k: f.get_tensor(k) for k in f.keys()}
        except Exception as e:  # noqa: BLE001
            raise InputError(path, None, f"not a readable safetensors file: {e}") from e
        hs = _tensor(path, data, "hidden_states")
        ids = _ids(path, data, "token_ids" if "token_ids" in data else "input_ids")
        if hs.dim() != 3 or hs.shape[0] != ids.numel():
            raise InputError(
                path, "hidden_states", f"shape {tuple(hs.shape)}, expected [{ids.numel()}, n, H]"
            )
        slots = [hs[:, i] for i in range(hs.shape[1])]
        m = re.search(r"(\d+)", path.stem)
        row = v2_rows.get(int(m.group(1))) if v2_rows is not None and m is not None else None
        if row is None:
            mask = torch.ones_like(ids)
            warnings.append("no loss mask found beside the v2 hidden states: every position counts")
        else:
            row_ids, mask = row
            if mask.numel() != ids.numel() or (
                row_ids is not None and not torch.equal(row_ids, ids)
            ):
                raise InputError(path, "token_ids", "differ from the dataset row's input_ids")
        fmt = "speculators-v2"
    else:
        data = load_torch_file(path)
        fmt = detect_format(path, data)
        ids = _ids(path, data, "input_ids")
        t = ids.numel()
        mask = _mask(path, data, t)
        if fmt == "speculators-v1":
            raw = data["hidden_states"]
            if len(raw) < 2:
                raise InputError(path, "hidden_states", f"{len(raw)} slots; at least 2 expected")
            slots = [_slots_2d(path, f"hidden_states[{i}]", s, t) for i, s in enumerate(raw)]
        elif fmt == "specforge":
            final = _slots_2d(path, "hidden_state", _tensor(path, data, "hidden_state"), t)
            aux = _slots_2d(path, "aux_hidden_state", _tensor(path, data, "aux_hidden_state"), t)
            width = final.shape[1]
            if aux.shape[1] % width:
                raise InputError(
                    path, "aux_hidden_state", f"width {aux.shape[1]} not a multiple of {width}"
                )
            slots = [*aux.split(width, dim=1), final]
        else:  # speculators-v0
            final = _slots_2d(path, "target", _tensor(path, data, "target"), t)
            cat = _slots_2d(path, "hidden_state", _tensor(path, data, "hidden_state"), t)
            width = final.shape[1]
            if cat.shape[1] % width:
                raise InputError(
                    path, "hidden_state", f"width {cat.shape[1]} not a multiple of {width}"
                )
            slots = [*cat.split(width, dim=1), final]
    widths = {s.shape[1] for s in slots}
    if len(widths) != 1:
        raise InputError(path, "hidden_states", f"slots have different widths {sorted(widths)}")
    for i, s in enumerate(slots):
        if not bool(torch.isfinite(s).all()):
            warnings.append(f"slot {i} contains NaN/Inf")
    info = _slot_info_for(fmt, len(slots), layer_ids, path)
    return Sample(
        input_ids=ids,
        slots=list(slots),
        loss_mask=mask,
        slot_info=info,
        path=str(path),
        format=fmt,
        warnings=warnings,
    )


class SampleSet:
    """An ordered list of sample files, loaded one at a time with a small LRU cache."""

    def __init__(self, spec: str | Path | Sequence[str | Path], cache_size: int = 4) -> None:
        self.files = discover(spec)
        self.layer_ids, self.data_config = read_data_config(self.files[0])
        self._v2_rows = None
        if self.files[0].suffix == ".safetensors":
            self._v2_rows = _v2_rows(self.files[0].parent)
        self._cache: OrderedDict[int, Sample] = OrderedDict()
        self._cache_size = cache_size
        self._first: Sample | None = None

    def __len__(self) -> int:
        return len(self.files)

    def __iter__(self) -> Iterator[Sample]:
        for i in range(len(self)):
            yield self[i]

    def __getitem__(self, i: int) -> Sample:
        if i < 0 or i >= len(self.files):
            raise IndexError(i)
        if i in self._cache:
            self._cache.move_to_end(i)
            return self._cache[i]
        sample = load_sample(self.files[i], self.layer_ids, v2_rows=self._v2_rows)
        self._cache[i] = sample
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return sample

    @property
    def format(self) -> str:
        return self.first.format

    @property
    def first(self) -> Sample:
        if self._first is None:
            self._first = self[0]
        return self._first

    @property
    def slot_info(self) -> list[SlotInfo]:
        return self.first.slot_info
