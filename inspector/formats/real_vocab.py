"""The target's real vocabulary: the ids its tokenizer can produce, against the padded `vocab_size`
its config.json writes.

Targets pad their embedding and head to a multiple of 64 or 128 rows (Qwen2.5: config vocab_size
152064 for 151665 tokens; a padded checkpoint 152576 for 152064). The rows past the tokenizer's last
id are never a true token. An engine that compares the draft's vocabulary with the padded size
rather than the real one builds a draft-to-target map the draft does not have
(`inspector.doctor.checks.vocab_contract` says when).

The real size is the tokenizer.json's largest id (its model vocabulary and its added tokens) plus
one; the padded size is the target's config.json `vocab_size` (its text_config's for a multimodal
target).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from inspector.errors import InputError
from inspector.formats.files import MAX_JSON_BYTES, one_line, read_bytes


@dataclass(frozen=True)
class RealVocab:
    """The ids a tokenizer produces: [0, size); `tokens`: how many distinct ids it holds (fewer
    than `size` where the ids have gaps)."""

    size: int
    tokens: int
    source: str


def _ids_of(vocab: object, path: Path) -> list[int]:
    """The ids of a tokenizer.json `model.vocab`: a piece -> id object (BPE, WordPiece,
    WordLevel) or a list of [piece, score] pairs whose index is the id (Unigram)."""
    if isinstance(vocab, dict):
        ids = list(vocab.values())
        if not all(type(i) is int and i >= 0 for i in ids):
            raise InputError(path, "model.vocab", "expected non-negative integer ids")
        return ids
    if isinstance(vocab, list):
        return list(range(len(vocab)))
    raise InputError(path, "model.vocab", "missing or neither an object nor a list")


def read_real_vocab(path: str | Path) -> RealVocab:
    """The real vocabulary of a tokenizer.json (InputError naming the field when malformed)."""
    p = Path(path)
    try:
        data = json.loads(read_bytes(p, MAX_JSON_BYTES).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise InputError(p, None, f"not a readable tokenizer.json: {one_line(str(e))}") from e
    model = data.get("model") if isinstance(data, dict) else None
    if not isinstance(model, dict):
        raise InputError(p, "model", "missing or not an object")
    ids = _ids_of(model.get("vocab"), p)
    added = data.get("added_tokens") or []
    if not isinstance(added, list):
        raise InputError(p, "added_tokens", "expected a list")
    for k, t in enumerate(added):
        i = t.get("id") if isinstance(t, dict) else None
        if type(i) is not int or i < 0:
            raise InputError(p, f"added_tokens[{k}].id", "expected a non-negative integer")
        ids.append(i)
    if not ids:
        raise InputError(p, "model.vocab", "holds no token")
    return RealVocab(size=max(ids) + 1, tokens=len(set(ids)), source=str(p))


def padded_vocab_size(folder: str | Path) -> int | None:
    """`vocab_size` of a target folder's config.json (its text_config's for a multimodal one):
    the rows of its embedding and head, padding included; None when it cannot be read."""
    try:
        data = json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    text = data.get("text_config") if isinstance(data.get("text_config"), dict) else data
    v = text.get("vocab_size", data.get("vocab_size"))
    return v if type(v) is int and v > 0 else None
