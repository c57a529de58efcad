"""Check (`doctor CKPT SAMPLES --parent PARENT`): what a fine-tune changed or dropped against the
checkpoint it started from, capture layers first.

Fine-tuning a released draft can overwrite the layer ids it reads with the trainer's defaults
and drop tensors the trainer does not know (ModelOpt PR #2149, 2026-08-11: DFlash/DSpark drafts
lost their capture layers and their attention-sink tensors), and nothing errors. The check reads
both folders as the loader does (the config through the canonical `DraftConfig`, the tensors
under their canonical names, so a layout's renaming is no change) and lists, in this order:

1. the capture ids: the ids an EAGLE-3 draft's config names, compared as the HF
   `hidden_states` indices they name (top-level ids as they are, `eagle_config`'s SGLang ids
   read through `wiring.configured_layers`; raw ids shown beside them), a block draft's
   `target_layer_ids` (or the reference's default, when the config names none), with the key
   each was read from;
2. the other config fields (config.json flattened to dotted keys), changed, added or dropped;
3. the tensors dropped, added, reshaped, and changed, each change as its relative norm
   |child - parent| / |parent| (largest first).

A tensor counts as changed above the unit roundoff of the coarser of its two stored dtypes
(half of `finfo.eps`): a cast between them moves every element by at most that much relative
to it, so the change's norm stays within it; a change below is a re-save, not training. The
norms are taken in float32 row chunks (float64 for float64 tensors), accumulated in float64, so
a 128K-row head is never copied whole.

An FP8 side (`formats.quantized`) is dequantized first, as the loader does, so the quantized
weights are compared as `scale * weight` with the parent's; its scales (`weight_scale`,
`input_scale`, ...) are left out of the tensor diff and listed apart, and the rounding FP8 costs
is the `quantization` finding's to measure.

Changed capture ids or a dropped tensor are a warning (the wiring finding says which ids the
weights fit); anything else is info.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from inspector.doctor.finding import Finding, Kind, Severity
from inspector.engines.capture import EAGLE_CONFIG, TOP_LEVEL
from inspector.errors import InputError, setting_field
from inspector.formats.block_config import block_family, parse_block_config
from inspector.formats.block_draft import canonical_block_name
from inspector.formats.checkpoint import canonical_name, is_gguf
from inspector.formats.config import parse_draft_config
from inspector.formats.quantized import FP8, dequantize
from inspector.formats.tensorfiles import find_weight_file, read_json, read_tensors
from inspector.wiring import configured_layers

__all__ = ["ParentDiff", "diff_against_parent", "parent_diff_finding"]

ABSENT = "absent"
# where an EAGLE-3 config's ids were read (`formats.config.aux_layer_ids`), as its key
_ID_KEYS = {
    TOP_LEVEL: "eagle_aux_hidden_state_layer_ids",
    EAGLE_CONFIG: "eagle_config.eagle_aux_hidden_state_layer_ids",
}
SHOWN = 6  # names quoted in the summary per list


@dataclass(frozen=True)
class CaptureIds:
    """The ids a draft's config has it read (None: it names none), the key they came from, and
    for EAGLE-3 the HF `hidden_states` indices they name (`wiring.configured_layers`: None when
    they read no one way), which is what two configs are compared on: a speculators [0, 2, 4] and
    its SpecForge export's eagle_config [-1, 1, 3] name the same layers."""

    ids: tuple[int, ...] | None
    where: str
    hf: tuple[int, ...] | None = None

    def words(self) -> str:
        if self.ids is None:
            return f"none ({self.where})"
        hf = f"; HF layers {list(self.hf)}" if self.hf is not None else ""
        return f"{list(self.ids)} ({self.where}{hf})"

    def same_layers(self, other: CaptureIds) -> bool:
        """Both name the same HF layers (raw ids and key compared where either reads no one
        way)."""
        if self.hf is not None and other.hf is not None:
            return self.hf == other.hf
        return (self.ids, self.where) == (other.ids, other.where)

    def to_dict(self) -> dict:
        out = {"ids": list(self.ids) if self.ids is not None else None, "key": self.where}
        if self.hf is not None:
            out["hf_layers"] = list(self.hf)
        return out


@dataclass(frozen=True)
class FieldChange:
    key: str  # dotted: "transformer_layer_config.rope_theta"
    parent: object  # ABSENT where the parent has no such key
    child: object

    def to_dict(self) -> dict:
        return {"key": self.key, "parent": self.parent, "child": self.child}


@dataclass(frozen=True)
class TensorChange:
    name: str  # canonical
    change: str  # "dropped" | "added" | "reshaped" | "changed"
    parent_shape: tuple[int, ...] | None = None
    child_shape: tuple[int, ...] | None = None
    relative: float | None = None  # |child - parent| / |parent| ("changed")

    def to_dict(self) -> dict:
        out: dict = {"name": self.name, "change": self.change}
        if self.parent_shape is not None:
            out["parent_shape"] = list(self.parent_shape)
        if self.child_shape is not None:
            out["child_shape"] = list(self.child_shape)
        if self.relative is not None:
            out["relative_change"] = self.relative
        return out


@dataclass
class ParentDiff:
    parent: str
    child: str
    family: str  # "eagle3" | a block family
    capture_parent: CaptureIds
    capture_child: CaptureIds
    fields: list[FieldChange] = field(default_factory=list)
    tensors: list[TensorChange] = field(default_factory=list)
    unchanged: int = 0  # tensors equal within the roundoff
    # FP8 scales left out of the tensor diff (the weights were dequantized with them), per side
    scales_parent: list[str] = field(default_factory=list)
    scales_child: list[str] = field(default_factory=list)

    @property
    def capture_changed(self) -> bool:
        return not self.capture_parent.same_layers(self.capture_child)

    def of(self, change: str) -> list[TensorChange]:
        return [t for t in self.tensors if t.change == change]

    def to_dict(self) -> dict:
        return {
            "parent": self.parent,
            "checkpoint": self.child,
            "family": self.family,
            "capture_ids": {
                "changed": self.capture_changed,
                "parent": self.capture_parent.to_dict(),
                "checkpoint": self.capture_child.to_dict(),
            },
            "config_fields": [f.to_dict() for f in self.fields],
            "tensors": [t.to_dict() for t in self.tensors],
            "tensors_unchanged": self.unchanged,
            "scales_left_out": {"parent": self.scales_parent, "checkpoint": self.scales_child},
        }

    def scales_words(self) -> str:
        """Which side's FP8 scales were left out of the tensor diff ("" when none)."""
        sides = [
            f"the {side}'s {len(names)} FP8 scales"
            for side, names in (("parent", self.scales_parent), ("checkpoint", self.scales_child))
            if names
        ]
        if not sides:
            return ""
        return " and ".join(sides) + " left out of the tensor diff (weights dequantized with them)"

    def lines(self) -> list[str]:
        out = [f"capture ids: {self.capture_parent.words()} -> {self.capture_child.words()}"]
        out += [f"config {f.key}: {f.parent!r} -> {f.child!r}" for f in self.fields]
        for t in self.tensors:
            if t.change == "changed":
                out.append(f"tensor {t.name}: changed by {t.relative:.3g} of its norm")
            elif t.change == "reshaped":
                out.append(
                    f"tensor {t.name}: {list(t.parent_shape or ())} -> {list(t.child_shape or ())}"
                )
            else:
                out.append(f"tensor {t.name}: {t.change}")
        if self.scales_words():
            out.append(self.scales_words())
        return out


def _flatten(obj: object, prefix: str = "") -> dict[str, object]:
    if isinstance(obj, dict):
        out: dict[str, object] = {}
        for k, v in obj.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out if out or not prefix else {prefix[:-1]: {}}
    return {prefix[:-1]: obj}


def _is_capture_key(key: str) -> bool:
    return "layer_ids" in key.rsplit(".", 1)[-1]


def _read(folder: Path) -> tuple[str, CaptureIds, dict, Path]:
    """A draft folder's family, capture ids, raw config and weight file."""
    cfg_path = folder / "config.json"
    raw = read_json(cfg_path)
    family = block_family(raw)
    if family is not None:
        cfg, _ = parse_block_config(cfg_path, raw, family)
        assert cfg.block is not None
        return family, CaptureIds(cfg.block.layer_ids, cfg.block.layer_ids_source), raw, cfg_path
    parsed = parse_draft_config(cfg_path, raw).config
    where = _ID_KEYS.get(parsed.aux_layer_convention or "", "the config names none")
    hf = configured_layers(parsed.aux_layer_ids, parsed.aux_layer_convention)
    return "eagle3", CaptureIds(parsed.aux_layer_ids, where, hf), raw, cfg_path


def _folder(path: str | Path, field: str | None) -> Path:
    p = Path(path)
    if is_gguf(p):
        raise InputError(p, field, "a GGUF file: the diff against a parent reads draft folders")
    if p.is_file():
        p = p.parent
    if not p.is_dir():
        raise InputError(p, field, "checkpoint folder not found")
    return p


def _tensors(folder: Path, family: str, raw: dict) -> tuple[dict[str, torch.Tensor], list[str]]:
    """The folder's tensors under their canonical names, FP8 weights dequantized as the loader
    does; and the scales that dequantizing dropped."""
    rename = canonical_name if family == "eagle3" else canonical_block_name
    wf = find_weight_file(folder)
    ts = {rename(n): t for n, t in read_tensors(wf).items()}
    if any(t.dtype in FP8 for t in ts.values()) or any("_scale" in n for n in ts):
        before = set(ts)
        dequantize(ts, folder, raw, wf)
        return ts, sorted(before - set(ts))
    return ts, []


CHUNK = 1 << 22  # elements per compared chunk (16 MiB in float32)


def _chunks(p: torch.Tensor, c: torch.Tensor, dtype: torch.dtype):
    """Both tensors in matching row chunks, cast to `dtype`."""
    p2, c2 = p.reshape(p.shape[0], -1), c.reshape(c.shape[0], -1)
    rows = max(1, CHUNK // max(1, p2.shape[1]))
    for i in range(0, p2.shape[0], rows):
        yield p2[i : i + rows].to(dtype), c2[i : i + rows].to(dtype)


def roundoff(a: torch.dtype, b: torch.dtype) -> float:
    """The unit roundoff of the coarser floating dtype of the two (0 for integer tensors)."""
    us = [torch.finfo(d).eps / 2 for d in (a, b) if d.is_floating_point]
    return max(us) if us else 0.0


def _compare(name: str, p: torch.Tensor, c: torch.Tensor) -> TensorChange | None:
    if tuple(p.shape) != tuple(c.shape):
        return TensorChange(name, "reshaped", tuple(p.shape), tuple(c.shape))
    if p.dtype == c.dtype and torch.equal(p, c):
        return None
    wide = torch.float64 in (p.dtype, c.dtype) or not (
        p.is_floating_point() and c.is_floating_point()
    )
    if p.numel() == 0:
        return None
    if p.dim() == 0:
        p, c = p.reshape(1), c.reshape(1)
    base2 = diff2 = 0.0
    for pf, cf in _chunks(p, c, torch.float64 if wide else torch.float32):
        base2 += float(torch.linalg.vector_norm(pf, dtype=torch.float64)) ** 2
        diff2 += float(torch.linalg.vector_norm(cf - pf, dtype=torch.float64)) ** 2
    if diff2 == 0.0:
        return None
    base = base2**0.5
    rel = diff2**0.5 / base if base > 0 else float("inf")
    if rel <= roundoff(p.dtype, c.dtype):
        return None
    return TensorChange(name, "changed", tuple(p.shape), tuple(c.shape), rel)


def diff_against_parent(child: str | Path, parent: str | Path) -> ParentDiff:
    """What `child` changed or dropped against `parent` (both draft folders of one family)."""
    cf, pf = _folder(child, None), _folder(parent, setting_field("parent"))
    c_family, c_ids, c_raw, c_cfg = _read(cf)
    p_family, p_ids, p_raw, _ = _read(pf)
    if c_family != p_family:
        raise InputError(
            c_cfg,
            "architectures",
            f"a {c_family} draft against a {p_family} parent: not one lineage",
        )
    out = ParentDiff(str(pf), str(cf), c_family, p_ids, c_ids)
    a, b = _flatten(p_raw), _flatten(c_raw)
    for key in sorted(set(a) | set(b)):
        if _is_capture_key(key) or a.get(key, ABSENT) == b.get(key, ABSENT):
            continue
        out.fields.append(FieldChange(key, a.get(key, ABSENT), b.get(key, ABSENT)))
    pt, out.scales_parent = _tensors(pf, p_family, p_raw)
    ct, out.scales_child = _tensors(cf, c_family, c_raw)
    dropped = [TensorChange(n, "dropped", tuple(pt[n].shape)) for n in sorted(set(pt) - set(ct))]
    added = [TensorChange(n, "added", None, tuple(ct[n].shape)) for n in sorted(set(ct) - set(pt))]
    compared = [_compare(n, pt[n], ct[n]) for n in sorted(set(pt) & set(ct))]
    reshaped = [t for t in compared if t is not None and t.change == "reshaped"]
    changed = sorted(
        (t for t in compared if t is not None and t.change == "changed"),
        key=lambda t: -(t.relative or 0.0),
    )
    out.tensors = [*dropped, *added, *reshaped, *changed]
    out.unchanged = sum(t is None for t in compared)
    return out


def _names(ts: list[TensorChange], with_rel: bool = False) -> str:
    shown = [f"{t.name} ({t.relative:.3g})" if with_rel else t.name for t in ts[:SHOWN]]
    return ", ".join(shown) + (", ..." if len(ts) > SHOWN else "")


def parent_diff_finding(diff: ParentDiff) -> Finding:
    parts = []
    if diff.capture_changed:
        parts.append(
            f"the capture ids changed: {diff.capture_parent.words()} -> "
            f"{diff.capture_child.words()}"
        )
    if diff.fields:
        shown = ", ".join(f"{f.key}: {f.parent!r} -> {f.child!r}" for f in diff.fields[:SHOWN])
        more = ", ..." if len(diff.fields) > SHOWN else ""
        parts.append(f"{len(diff.fields)} config fields changed ({shown}{more})")
    for change, words in (("dropped", "dropped"), ("added", "added"), ("reshaped", "reshaped")):
        ts = diff.of(change)
        if ts:
            parts.append(f"{len(ts)} tensors {words} ({_names(ts)})")
    changed = diff.of("changed")
    if changed:
        parts.append(
            f"{len(changed)} tensors changed, by their relative norm ({_names(changed, True)})"
        )
    if diff.scales_words():
        parts.append(diff.scales_words())
    where = f"{diff.child} against its parent {diff.parent}"
    if not parts:
        return Finding(
            Kind.PARENT_DIFF,
            Severity.INFO,
            f"{where}: the same capture ids ({diff.capture_child.words()}), config and tensors",
            "",
            diff,
        )
    warn = diff.capture_changed or bool(diff.of("dropped"))
    summary = f"{where}: " + "; ".join(parts)
    if not diff.capture_changed:
        summary += f"; the capture ids are the parent's {diff.capture_child.words()}"
    fix = ""
    if diff.capture_changed:
        fix = (
            "write the ids the weights were trained on (the wiring finding ranks them): a "
            "fine-tune that started from the parent's may have written its trainer's defaults"
        )
    if diff.of("dropped"):
        fix += ("; " if fix else "") + "copy the dropped tensors back from the parent, or "
        fix += "confirm the fine-tune meant to drop them"
    return Finding(
        Kind.PARENT_DIFF, Severity.WARNING if warn else Severity.INFO, summary, fix, diff
    )
