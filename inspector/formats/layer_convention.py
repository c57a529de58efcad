"""Which HF indices a data_config.json's `layer_ids` name, decided from what the file itself says.

HF index k is `output_hidden_states[k]` of an L-layer target: 0 the embedding output, k the output
of decoder layer k-1, L the last layer's output (pre-norm, as engines capture it). A file's
`layer_ids` are either HF indices (vLLM's convention, speculators >= v0.5, our own capture) or
decoder-layer output ids (speculators <= v0.4: HF index = id + 1). The file decides between the
two with, in this order of strength:

1. the layer count (`num_hidden_layers` in the file, or in the config.json of the `target` folder
   it names): an id of L cannot be the output of a decoder layer of an L-layer target, and an id
   above L exists in neither reading;
2. a stated convention: our key `index_convention` ("hf" / "speculators"), a prose field such as
   `layer_id_convention` or `index_note`, or the writer named in the file.

Nothing else in the file says it, so without either the reader keeps the speculators v1 default
(decoder-layer outputs) and records that the reading is a guess (`decided_by` None); the doctor
then states both readings. Pure: the dict in, a `LayerIdReading` out (the optional target config
is the only file read).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from inspector.errors import InputError

HF = "hf"
LAYER_OUTPUT = "layer_output"
POST_NORM = "post-norm"  # a layer_ids entry for the target's final norm output (HF files only)
CONVENTION_KEYS = {"hf": HF, "speculators": LAYER_OUTPUT}
# Free-text fields writers use to say what their ids mean.
PROSE_KEYS = ("layer_id_convention", "layer_ids_convention", "index_note", "layer_ids_note")
WRITER_KEYS = ("generator", "writer", "generated_by", "created_by")
# Words that name each convention in prose.
_HF_WORDS = re.compile(r"output_hidden_states|\bhf\b|0\s*=\s*(the\s+)?embed", re.I)
_OUTPUT_WORDS = re.compile(r"output of (decoder )?layer (i|id)\b|decoder[- ]layer output id", re.I)


@dataclass(frozen=True)
class LayerIdReading:
    """The file's ids, the reading chosen, why, and what the other reading would give.

    decided_by: what decided the reading ("layer count", "index_convention", the prose field's
      name, "generator ..."); None when nothing did and the speculators default was assumed.
    other_hf: the HF indices under the other reading, when the file does not rule it out.
    conflict: a stated convention the layer count overrules, in words.
    """

    path: Path
    key: str
    ids: tuple[int | str, ...]
    convention: str
    decided_by: str | None
    num_layers: int | None = None
    layers_from: str | None = None
    other_hf: tuple[int, ...] | None = None
    conflict: str | None = None

    @property
    def decided(self) -> bool:
        return self.decided_by is not None

    @property
    def hf(self) -> list[int | None]:
        """HF index of every slot (None: the post-norm final state)."""
        shift = 1 if self.convention == LAYER_OUTPUT else 0
        return [None if i == POST_NORM else int(i) + shift for i in self.ids]

    def to_dict(self) -> dict:
        return {
            "where": f"{self.path.name} {self.key}",
            "ids": list(self.ids),
            "convention": self.convention,
            "decided_by": self.decided_by,
            "num_layers": self.num_layers,
            "layers_from": self.layers_from,
            "other_hf_indices": list(self.other_hf) if self.other_hf is not None else None,
            "conflict": self.conflict,
        }


def prose_convention(text: str) -> str | None:
    """The convention a free-text field names, or None when it names neither or both."""
    hf, out = bool(_HF_WORDS.search(text)), bool(_OUTPUT_WORDS.search(text))
    if hf and not out:
        return HF
    if out and not hf:
        return LAYER_OUTPUT
    return None


def _writer_convention(cfg: dict, hs: dict) -> tuple[str, str] | None:
    """speculators names itself with a version: <= 0.4 wrote decoder-layer output ids."""
    for d in (hs, cfg):
        for key in WRITER_KEYS:
            name = d.get(key)
            if not isinstance(name, str) or "speculators" not in name.lower():
                continue
            m = re.search(r"(\d+)\.(\d+)", name + " " + str(d.get("speculators_version", "")))
            if m is None:
                continue
            old = (int(m.group(1)), int(m.group(2))) <= (0, 4)
            return (LAYER_OUTPUT if old else HF), f"{key} {name!r}"
    return None


def _layer_count(cfg: dict, hs: dict, path: Path) -> tuple[int | None, str | None]:
    """The target's layer count from the file, or from the config.json of the target it names."""
    places = (("hidden_states", hs), ("", cfg)) if hs is not cfg else (("", cfg),)
    for where, d in (*places, ("target", cfg.get("target"))):
        n = d.get("num_hidden_layers") if isinstance(d, dict) else None
        if type(n) is int and n > 0:
            key = f"{where}.num_hidden_layers" if where else "num_hidden_layers"
            return n, f"{path.name} {key}"
    target = cfg.get("target")
    if isinstance(target, str) and target:
        folder = (path.parent / target).resolve()
        n = target_layer_count(folder)
        if n is not None:
            return n, f"{folder / 'config.json'} num_hidden_layers"
    return None, None


def target_layer_count(folder: str | Path) -> int | None:
    """`num_hidden_layers` of a target model folder's config.json (its text_config for a
    multimodal one); None when it cannot be read."""
    try:
        data = json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    text = data.get("text_config", data) if isinstance(data, dict) else {}
    n = text.get("num_hidden_layers") if isinstance(text, dict) else None
    return n if type(n) is int and n > 0 else None


def target_model_type(folder: str | Path) -> str | None:
    """`model_type` of a target model folder's config.json (its text_config's for a multimodal
    one: the text model is what an engine's layer ids index); None when it cannot be read."""
    try:
        data = json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    text = data.get("text_config") if isinstance(data.get("text_config"), dict) else data
    kind = text.get("model_type", data.get("model_type"))
    return kind if isinstance(kind, str) else None


def read_layer_ids(
    cfg: dict, path: Path, *, num_layers: int | None = None, layers_from: str | None = None
) -> LayerIdReading | None:
    """The reading of a parsed data_config.json at `path` (None when it has no layer_ids).

    num_layers: the target's layer count from elsewhere (its config.json), used when the file
    gives none (`layers_from` says where it came from).

    Raises InputError for ids no target can have (negative, or above the layer count) and for an
    `index_convention` other than "hf" / "speculators"."""
    nested = isinstance(cfg.get("hidden_states"), dict)
    hs = cfg["hidden_states"] if nested else cfg
    key = "hidden_states.layer_ids" if nested else "layer_ids"
    ids = hs.get("layer_ids")
    if ids is None:
        return None
    stated = hs.get("index_convention", cfg.get("index_convention"))
    if stated is not None and stated not in CONVENTION_KEYS:
        raise InputError(path, "index_convention", f"{stated!r}: expected 'hf' or 'speculators'")
    if not isinstance(ids, list) or not all(
        (isinstance(i, int) and not isinstance(i, bool)) or (stated == "hf" and i == POST_NORM)
        for i in ids
    ):
        raise InputError(path, key, f"expected a list of integers, got {ids!r}")
    numbers = [i for i in ids if i != POST_NORM]
    if any(i < 0 for i in numbers):
        raise InputError(path, key, f"{min(numbers)} is negative: layer ids count from 0")
    L, found_in = _layer_count(cfg, hs, path)
    if L is None and num_layers is not None:
        L, found_in = num_layers, layers_from or "the target's config.json"
    layers_from = found_in
    top = max(numbers, default=0)
    if L is not None and top > L:
        raise InputError(
            path, key, f"id {top} is above the target's {L} layers ({layers_from}): no layer has it"
        )
    # What the file states, strongest first among the statements.
    claim: tuple[str, str] | None = None
    if stated is not None:
        claim = CONVENTION_KEYS[stated], "index_convention"
    else:
        for d in (hs, cfg):
            for k in PROSE_KEYS:
                if claim is None and isinstance(d.get(k), str):
                    conv = prose_convention(d[k])
                    claim = (conv, k) if conv is not None else None
        claim = claim or _writer_convention(cfg, hs)
    conflict = None
    if L is not None and top == L and POST_NORM not in ids:
        # Decoder layers are 0..L-1: an id of L is an HF index (the last layer's output).
        if claim is not None and claim[0] == LAYER_OUTPUT:
            conflict = (
                f"{claim[1]} says decoder-layer output ids, but id {L} names no decoder layer of "
                f"a {L}-layer target ({layers_from}): the ids are HF indices"
            )
        return LayerIdReading(
            path, key, tuple(ids), HF, "layer count", L, layers_from, None, conflict
        )
    if claim is not None:
        return LayerIdReading(path, key, tuple(ids), claim[0], claim[1], L, layers_from)
    return LayerIdReading(
        path, key, tuple(ids), LAYER_OUTPUT, None, L, layers_from, tuple(int(i) for i in numbers)
    )
