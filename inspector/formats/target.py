"""The few target-model tensors the inspector needs, read without loading the rest."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from inspector.errors import InputError
from inspector.formats.tensorfiles import find_weight_file, read_json, read_tensors, tensor_names

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


def read_embedding(path: Path) -> torch.Tensor:
    """`model.embed_tokens.weight` from a target folder or from a safetensors / .bin file."""
    path = Path(path)
    weight_file = find_weight_file(path) if path.is_dir() else path
    if not weight_file.exists():
        raise InputError(path, None, "file not found")
    name = _pick(set(tensor_names(weight_file)), EMBED_NAMES)
    if name is None:
        raise InputError(weight_file, "model.embed_tokens.weight", "tensor not found")
    return read_tensors(weight_file, [name])[name]


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


def read_target_head(folder: Path) -> TargetHead:
    folder = Path(folder)
    weight_file = find_weight_file(folder)
    names = set(tensor_names(weight_file))
    cfg_path = folder / "config.json"
    cfg = read_json(cfg_path) if cfg_path.is_file() else {}
    text_cfg = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    eps = float(text_cfg.get("rms_norm_eps", 1e-6))
    head = _pick(names, HEAD_NAMES)
    embed = _pick(names, EMBED_NAMES)
    if head is None:
        if text_cfg.get("tie_word_embeddings") and embed is not None:
            head = embed
        else:
            raise InputError(weight_file, "lm_head.weight", "tensor not found")
    norm = _pick(names, NORM_NAMES)
    tensors = read_tensors(weight_file, [n for n in (head, norm) if n])
    return TargetHead(tensors.get(norm) if norm else None, tensors[head], eps, str(folder))
