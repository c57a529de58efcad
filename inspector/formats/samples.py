"""Saved training samples of every public trainer, loaded lazily into canonical `Sample`s.

- speculators v1 `.pt`: {"input_ids", "hidden_states": [T,H] x S, "loss_mask"}; the last slot is the
  verifier's last (pre-norm) state. `data_config.json` gives the slots' layer ids.
- speculators v0 `.pt`: {"input_ids", "loss_mask", "hidden_state": [T, 3H], "target": [T, H]}.
- SpecForge `.ckpt`: {"input_ids", "loss_mask", "hidden_state": [1,T,H] post-norm,
  "aux_hidden_state": [1,T,N*H]}.
- speculators v2 `hs_{i}.safetensors`: {"hidden_states": [T, n, H], "token_ids": [T]}, loss mask from
  the Arrow dataset beside it when pyarrow is installed, else all ones (with a warning).

Each sample is validated as it loads: integer token ids inside the target vocabulary (when the
set knows it), a loss mask of 0s and 1s, floating slots of one width. A file that fails is an
InputError naming the file and the field; a `SampleSet` (sample_set.py) records it once in
`skipped` and goes on with the others.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Sequence
from pathlib import Path

import torch

from inspector.errors import InputError
from inspector.formats.files import check_regular, file_kind, one_line
from inspector.formats.layer_convention import read_layer_ids
from inspector.formats.tensorfiles import load_torch_file, read_json, read_safetensors
from inspector.sample import FINISH_REASONS, Continuation, Sample, SlotInfo, check_category

SAMPLE_SUFFIXES = (".pt", ".ckpt", ".safetensors")
FLOAT16_MAX = 65504.0  # the largest finite float16: a capture in fp16 saturates to inf past it
INTEGER_DTYPES = (
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint16,
    torch.uint32,
    torch.uint64,
)


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
        elif p.exists():
            raise InputError(s, None, f"is {file_kind(os.stat(p).st_mode)}, not a sample file")
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


def _labels_from_layer_ids(ids: list[int | None]) -> list[SlotInfo]:
    return [
        SlotInfo("final(post-norm)", post_norm=True)
        if i is None
        else SlotInfo("embed" if i == 0 else f"L{i}", hf_index=i)
        for i in ids
    ]


def read_data_config(
    sample_file: Path, *, num_layers: int | None = None, layers_from: str | None = None
) -> tuple[list[int | None] | None, Path | None]:
    """HF indices of the slots, from a data_config.json beside the samples (or one folder up).

    Which convention the file's `hidden_states.layer_ids` use is decided from the file
    (`layer_convention.read_layer_ids`: its layer count, its `index_convention`, a prose field,
    its writer); a file that says nothing is read as speculators v1 wrote it (decoder-layer output
    ids, HF index = id + 1). An HF file may name the target's final norm output as `"post-norm"`
    (returned as None). num_layers: the target's layer count when known from elsewhere (--target),
    evidence for a file that gives none.
    """
    path = data_config_path(sample_file)
    if path is None:
        return None, None
    reading = read_layer_ids(read_json(path), path, num_layers=num_layers, layers_from=layers_from)
    return (reading.hf if reading is not None else None), path


def data_config_path(sample_file: Path) -> Path | None:
    """The data_config.json beside the samples or one folder up, if any."""
    for folder in (sample_file.parent, sample_file.parent.parent):
        path = folder / "data_config.json"
        if path.exists():
            return path
    return None


SLOT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _dense(path: Path, key: str, t: torch.Tensor) -> torch.Tensor:
    """`t` when it is plain stored data: a dense CPU tensor whose view reads no more elements
    than its storage holds. A sparse or meta tensor fails deep inside torch; a stride-0 view
    (`expand`) of a few stored bytes claims gigabytes and materialises them on first use."""
    if t.layout != torch.strided:
        raise InputError(path, key, f"{t.layout} layout: expected a dense tensor")
    if t.device.type != "cpu":
        raise InputError(path, key, f"on device {t.device.type}: expected stored data")
    stored = t.untyped_storage().nbytes()
    if t.numel() * t.element_size() > stored:
        raise InputError(
            path,
            key,
            f"shape {tuple(t.shape)} claims {t.numel() * t.element_size()} bytes over "
            f"{stored} stored (a broadcast view): expected plain data",
        )
    return t


def _tensor(path: Path, data: dict, key: str) -> torch.Tensor:
    if key not in data:
        raise InputError(path, key, "missing")
    t = data[key]
    if not isinstance(t, torch.Tensor):
        raise InputError(path, key, f"expected a tensor, got {type(t).__name__}")
    return _dense(path, key, t)


def _ids(
    path: Path, t: torch.Tensor, key: str, vocab_size: int | None, min_tokens: int = 3
) -> torch.Tensor:
    """Token ids [T], integers in [0, vocab_size), at least `min_tokens` of them."""
    # [1, T] as some writers store it; a [1] continuation stays one token
    t = t.squeeze() if min_tokens > 1 else (t[0] if t.dim() == 2 and t.shape[0] == 1 else t)
    if t.dtype not in INTEGER_DTYPES:
        raise InputError(path, key, f"dtype {t.dtype}, expected integer token ids")
    if t.dim() != 1 or t.numel() < min_tokens:
        raise InputError(
            path,
            key,
            f"expected integer ids [T] with T >= {min_tokens}, got shape {tuple(t.shape)}",
        )
    t = t.long()
    bad = t < 0 if vocab_size is None else (t < 0) | (t >= vocab_size)
    if bool(bad.any()):
        i = int(bad.nonzero()[0])
        where = "negative" if vocab_size is None else f"outside the vocabulary [0, {vocab_size})"
        raise InputError(path, key, f"token id {int(t[i])} at position {i} is {where}")
    return t


def _mask(path: Path, t: torch.Tensor, n: int, key: str = "loss_mask") -> torch.Tensor:
    """A loss mask [n] of 0s and 1s (bool, integer or float storage), as int64."""
    t = t.squeeze()
    if t.dim() != 1 or t.numel() != n:
        raise InputError(path, key, f"shape {tuple(t.shape)}, expected [{n}]")
    if t.is_complex():
        raise InputError(path, key, f"dtype {t.dtype}, expected 0/1 values")
    if t.dtype != torch.bool:
        bad = (t != 0) & (t != 1)
        if bool(bad.any()):
            i = int(bad.nonzero()[0])
            raise InputError(path, key, f"value {t[i].item()} at position {i}: expected 0 or 1")
    return t.long()


def _slots_2d(path: Path, key: str, t: object, n: int) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise InputError(path, key, f"expected a tensor, got {type(t).__name__}")
    _dense(path, key, t)
    if t.dim() == 3 and t.shape[0] == 1:
        t = t[0]
    if t.dim() != 2 or t.shape[0] != n:
        raise InputError(path, key, f"shape {tuple(t.shape)}, expected [{n}, hidden]")
    if t.dtype not in SLOT_DTYPES:
        names = ", ".join(str(d).removeprefix("torch.") for d in SLOT_DTYPES)
        raise InputError(path, key, f"dtype {t.dtype}, expected one of {names}")
    return t


def detect_format(path: Path, data: object) -> str:
    """The layout of a loaded torch sample (speculators v2 files are safetensors, not these)."""
    if not isinstance(data, dict):
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


def v1_slot_info(layer_ids: list[int | None]) -> list[SlotInfo]:
    """The slots of a speculators v1 sample whose data_config.json names these HF indices (None:
    the post-norm state), as the loader will read them: what a writer chooses wirings among
    before its samples exist."""
    return _slot_info_for("speculators-v1", len(layer_ids), layer_ids, Path("data_config.json"))


def read_v2_rows(folder: Path) -> dict[int, tuple[torch.Tensor | None, torch.Tensor]] | None:
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
            check_regular(f)
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
                try:
                    row_ids = torch.tensor(ids[i], dtype=torch.long) if ids is not None else None
                    rows[len(rows)] = (row_ids, torch.tensor(m))
                except (TypeError, ValueError, RuntimeError, OverflowError) as e:
                    raise InputError(f, f"row {i}", f"not a list of integers: {e}") from None
        return rows
    return None


def _load_v2(
    path: Path, v2_rows: dict | None, vocab_size: int | None, warnings: list[str]
) -> tuple[torch.Tensor, list[torch.Tensor], torch.Tensor]:
    data = read_safetensors(path)
    hs = _tensor(path, data, "hidden_states")
    key = "token_ids" if "token_ids" in data else "input_ids"
    ids = _ids(path, _tensor(path, data, key), key, vocab_size)
    if hs.dim() != 3 or hs.shape[0] != ids.numel() or not hs.is_floating_point():
        raise InputError(
            path,
            "hidden_states",
            f"shape {tuple(hs.shape)} {hs.dtype}, expected floating [{ids.numel()}, n, H]",
        )
    slots = [hs[:, i] for i in range(hs.shape[1])]
    m = re.search(r"(\d+)", path.stem)
    row = v2_rows.get(int(m.group(1))) if v2_rows is not None and m is not None else None
    if row is None:
        warnings.append("no loss mask found beside the v2 hidden states: every position counts")
        return ids, slots, torch.ones_like(ids)
    row_ids, mask = row
    if mask.numel() != ids.numel() or (row_ids is not None and not torch.equal(row_ids, ids)):
        raise InputError(path, key, "differ from the dataset row's input_ids")
    return ids, slots, _mask(path, mask, ids.numel())


CONTINUATION_KEYS = ("continuation_ids", "continuation_hidden_states", "finish_reason")


def _continuation(
    path: Path, data: dict, n_slots: int, vocab_size: int | None
) -> Continuation | None:
    """The target's continuation past the request's stop, as capture writes it beside a v1
    sample (keys no trainer reads); None when the file has none."""
    present = [k for k in CONTINUATION_KEYS if k in data]
    if not present:
        return None
    missing = [k for k in CONTINUATION_KEYS if k not in data]
    if missing:
        raise InputError(path, missing[0], f"missing beside {present[0]}")
    ids = _ids(path, _tensor(path, data, "continuation_ids"), "continuation_ids", vocab_size, 0)
    raw = data["continuation_hidden_states"]
    if not isinstance(raw, list | tuple) or len(raw) != n_slots:
        got = len(raw) if isinstance(raw, list | tuple) else type(raw).__name__
        raise InputError(
            path, "continuation_hidden_states", f"{got} slots; the sample has {n_slots}"
        )
    c = ids.numel()
    slots = [_slots_2d(path, f"continuation_hidden_states[{i}]", s, c) for i, s in enumerate(raw)]
    finish = data["finish_reason"]
    if finish not in FINISH_REASONS:
        raise InputError(
            path,
            "finish_reason",
            f"{one_line(repr(finish))[:40]}: one of {', '.join(FINISH_REASONS)}",
        )
    return Continuation(ids, slots, finish)


def _category(path: Path, data: dict) -> str | None:
    """The optional "category" key capture writes from an input line's own."""
    if "category" not in data:
        return None
    return check_category(data["category"], path, "category")


def _load_torch_sample(
    path: Path, vocab_size: int | None
) -> tuple[str, torch.Tensor, list[torch.Tensor], torch.Tensor, Continuation | None, str | None]:
    data = load_torch_file(path)
    fmt = detect_format(path, data)
    assert isinstance(data, dict)
    category = _category(path, data)
    ids = _ids(path, _tensor(path, data, "input_ids"), "input_ids", vocab_size)
    t = ids.numel()
    mask = _mask(path, _tensor(path, data, "loss_mask"), t)
    if fmt == "speculators-v1":
        raw = data["hidden_states"]
        if len(raw) < 2:
            raise InputError(path, "hidden_states", f"{len(raw)} slots; at least 2 expected")
        slots = [_slots_2d(path, f"hidden_states[{i}]", s, t) for i, s in enumerate(raw)]
        cont = _continuation(path, data, len(slots), vocab_size)
        if cont is not None and {x.shape[1] for x in cont.slots} != {slots[0].shape[1]}:
            raise InputError(
                path, "continuation_hidden_states", "widths differ from the sample's slots"
            )
        return fmt, ids, slots, mask, cont, category
    # specforge: aux [T, N*H] + final [T, H]; speculators-v0: hidden_state [T, N*H] + target [T, H]
    cat_key, final_key = (
        ("aux_hidden_state", "hidden_state") if fmt == "specforge" else ("hidden_state", "target")
    )
    final = _slots_2d(path, final_key, _tensor(path, data, final_key), t)
    cat = _slots_2d(path, cat_key, _tensor(path, data, cat_key), t)
    width = final.shape[1]
    if width == 0 or cat.shape[1] % width or cat.shape[1] == 0:
        raise InputError(path, cat_key, f"width {cat.shape[1]} not a multiple of {width}")
    return fmt, ids, [*cat.split(width, dim=1), final], mask, None, category


def slot_warnings(slots: Sequence[torch.Tensor]) -> list[str]:
    """Non-finite values and a float16 capture that saturated, named per slot (the sample still
    loads; whether float32 values overflow float16 depends on the evaluation dtype: the
    evaluator checks that)."""
    out: list[str] = []
    for i, s in enumerate(slots):
        finite = torch.isfinite(s)
        if not bool(finite.all()):
            out.append(f"slot {i} contains NaN/Inf")
        if s.dtype == torch.float16 and s.numel():
            peak = float(s.abs().masked_fill(~finite, 0).max())
            if peak >= FLOAT16_MAX or bool(torch.isinf(s).any()):
                out.append(
                    f"slot {i} reaches the float16 limit {FLOAT16_MAX:g}: the capture overflowed"
                )
    return out


def load_sample(
    path: Path,
    layer_ids: list[int | None] | None = None,
    *,
    v2_rows: dict | None = None,
    vocab_size: int | None = None,
) -> Sample:
    """Load and validate one sample file into a canonical Sample.

    `vocab_size`: the target vocabulary the draft embeds, when known; a token id outside it
    (or negative) is refused here rather than failing inside the forward pass.
    """
    path = Path(path)
    check_regular(path)
    warnings: list[str] = []
    cont = None
    if path.suffix == ".safetensors":
        fmt = "speculators-v2"
        ids, slots, mask = _load_v2(path, v2_rows, vocab_size, warnings)
        category = None
    else:
        fmt, ids, slots, mask, cont, category = _load_torch_sample(path, vocab_size)
    widths = {s.shape[1] for s in slots}
    if len(widths) != 1:
        raise InputError(path, "hidden_states", f"slots have different widths {sorted(widths)}")
    warnings += slot_warnings(slots)
    info = _slot_info_for(fmt, len(slots), layer_ids, path)
    return Sample(
        input_ids=ids,
        slots=list(slots),
        loss_mask=mask,
        slot_info=info,
        path=str(path),
        format=fmt,
        warnings=warnings,
        continuation=cont,
        category=category,
    )
