"""The few target-model tensors the inspector needs, read without loading the rest.

Each is checked against the draft it serves before its data is read (from the safetensors header
when there is one): the embedding must be [vocab_size, hidden_size] of the draft, the lm_head
[vocab_size, target_hidden_size], the final norm [target_hidden_size].
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from inspector.errors import InputError
from inspector.formats.config import DEFAULT_RMS_NORM_EPS, ConfigReader
from inspector.formats.tensorfiles import (
    find_weight_file,
    read_json,
    read_tensors,
    tensor_headers,
    tensor_names,
)

EMBED_NAMES = ("model.embed_tokens.weight", "embed_tokens.weight", "model.embed.weight")
NORM_NAMES = ("model.norm.weight", "norm.weight")
HEAD_NAMES = ("lm_head.weight",)


def _pick(names: set[str], options: tuple[str, ...]) -> str | None:
    for o in options:
        if o in names:
            return o
    # Multimodal targets nest the LM, e.g. "model.language_model.embed_tokens.weight".
    for n in sorted(names):
        if any(n.endswith(o.split("model.", 1)[-1]) and "embed" in o for o in options):
            return n
    return None


def _read_checked(
    weight_file: Path, wanted: dict[str, tuple[int, ...] | None], why: str
) -> dict[str, torch.Tensor]:
    """Read tensors whose expected shapes are given (None: any), checking the declared shape in
    the safetensors header first, so a wrong-sized tensor is refused without reading it."""
    headers = tensor_headers(weight_file, list(wanted)) or {}
    for name, shape in wanted.items():
        if shape is not None and name in headers and headers[name].shape != shape:
            raise InputError(
                weight_file, name, f"shape {headers[name].shape}, expected {shape} ({why})"
            )
    tensors = read_tensors(weight_file, list(wanted))
    for name, shape in wanted.items():
        t = tensors[name]
        if shape is not None and tuple(t.shape) != shape:
            raise InputError(weight_file, name, f"shape {tuple(t.shape)}, expected {shape} ({why})")
        if not t.is_floating_point():
            raise InputError(weight_file, name, f"dtype {t.dtype}, expected a floating type")
        if not bool(torch.isfinite(t).all()):
            raise InputError(weight_file, name, "contains NaN or Inf")
    return tensors


def read_embedding(path: Path, shape: tuple[int, int] | None = None) -> torch.Tensor:
    """`model.embed_tokens.weight` from a target folder or from a safetensors / .bin file;
    `shape` [vocab_size, hidden_size] of the draft it is for, when known."""
    path = Path(path)
    weight_file = find_weight_file(path) if path.is_dir() else path
    if not weight_file.exists():
        raise InputError(path, None, "file not found")
    name = _pick(set(tensor_names(weight_file)), EMBED_NAMES)
    if name is None:
        raise InputError(weight_file, "model.embed_tokens.weight", "tensor not found")
    why = "the draft's [vocab_size, hidden_size]"
    return _read_checked(weight_file, {name: shape}, why)[name]


@dataclass
class TargetHead:
    """Final norm + lm_head of the target, to rebuild verifier logits from its last hidden state."""

    norm_weight: torch.Tensor | None  # None when the target ties no norm we could find
    lm_head: torch.Tensor  # [V, Ht]
    rms_norm_eps: float
    path: str

    def to(self, device: torch.device | str, dtype: torch.dtype | None = None) -> TargetHead:
        return TargetHead(
            None if self.norm_weight is None else self.norm_weight.to(device, dtype),
            self.lm_head.to(device, dtype),
            self.rms_norm_eps,
            self.path,
        )


def read_target_head(
    folder: Path, *, vocab_size: int | None = None, hidden_size: int | None = None
) -> TargetHead:
    """The target's final norm and lm_head from its folder, checked against the draft's target
    vocab (`vocab_size`) and `target_hidden_size` when they are given."""
    folder = Path(folder)
    weight_file = find_weight_file(folder)
    names = set(tensor_names(weight_file))
    cfg_path = folder / "config.json"
    top = ConfigReader(cfg_path, read_json(cfg_path) if cfg_path.exists() else {})
    text = top.sub("text_config") or top  # multimodal targets nest the LM's config
    eps = text.positive_number("rms_norm_eps", DEFAULT_RMS_NORM_EPS)
    head = _pick(names, HEAD_NAMES)
    embed = _pick(names, EMBED_NAMES)
    if head is None:
        if text.flag("tie_word_embeddings") and embed is not None:
            head = embed
        else:
            raise InputError(weight_file, "lm_head.weight", "tensor not found")
    norm = _pick(names, NORM_NAMES)
    head_shape = (vocab_size, hidden_size) if vocab_size and hidden_size else None
    wanted: dict[str, tuple[int, ...] | None] = {head: head_shape}
    if norm:
        wanted[norm] = (hidden_size,) if hidden_size else None
    tensors = _read_checked(weight_file, wanted, "the draft's vocab_size and target_hidden_size")
    return TargetHead(tensors.get(norm) if norm else None, tensors[head], eps, str(folder))
