"""Token ids -> short visible strings for the app (whitespace made visible), or the ids themselves.

A `tokenizer.json` (Hugging Face `tokenizers`) is looked for where it is given, then beside the
checkpoint, then in the target folder. Without one every token shows as its id.

Single tokens are decoded from their vocabulary entry rather than with `decode([id])`: byte-level BPE
pieces of a multi-byte character do not decode alone, and SentencePiece decoders drop the leading
space of a lone token, which is exactly the detail a person inspecting predictions needs to see.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from inspector.errors import InputError
from inspector.formats.files import MAX_JSON_BYTES, one_line, read_bytes

TOKENIZER_FILE = "tokenizer.json"

VISIBLE = {" ": "·", "\n": "⏎", "\t": "→", "\r": "␍"}


def find_tokenizer(
    explicit: str | Path | None,
    checkpoint: str | Path | None = None,
    target: str | Path | None = None,
) -> Path | None:
    """The tokenizer.json to use: the given file or folder, else beside the checkpoint or target.

    An explicit path that holds no tokenizer is an error; not finding one elsewhere is not.
    """
    if explicit is not None:
        p = Path(explicit)
        if p.is_dir():
            p = p / TOKENIZER_FILE
        if not p.is_file():
            raise InputError(explicit, None, "no tokenizer.json here")
        return p
    for folder in (checkpoint, target):
        if folder is None:
            continue
        f = Path(folder)
        if f.is_file():
            f = f.parent
        if (f / TOKENIZER_FILE).is_file():
            return f / TOKENIZER_FILE
    return None


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """Inverse of GPT-2's bytes_to_unicode: the printable character standing for each byte."""
    bs = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs, strict=True)}


def make_visible(text: str) -> str:
    """Whitespace and control characters as visible glyphs; an empty piece as '∅'."""
    if not text:
        return "∅"
    out = []
    for ch in text:
        if ch in VISIBLE:
            out.append(VISIBLE[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "".join(out)


def _uses(node: object, kind: str) -> bool:
    """Whether a tokenizer.json component (or any member of a Sequence) is of type `kind`."""
    if isinstance(node, dict):
        if node.get("type") == kind:
            return True
        for key in ("decoders", "pretokenizers", "normalizers"):
            if any(_uses(n, kind) for n in node.get(key) or []):
                return True
    return False


class TokenDecoder:
    """Decodes single token ids into raw and visible text, with a cache; ids when no tokenizer."""

    def __init__(self, tokenizer: object | None = None, source: str | None = None) -> None:
        self._tok = tokenizer
        self.source = source
        self._visible: dict[int, str] = {}
        self._raw: dict[int, str | None] = {}
        self._byte_level = False
        self._metaspace = False
        self._special: set[str] = set()
        if tokenizer is not None:
            import json

            spec = json.loads(tokenizer.to_str())  # type: ignore[attr-defined]
            self._byte_level = _uses(spec.get("decoder"), "ByteLevel") or _uses(
                spec.get("pre_tokenizer"), "ByteLevel"
            )
            self._metaspace = _uses(spec.get("decoder"), "Metaspace") or _uses(
                spec.get("pre_tokenizer"), "Metaspace"
            )
            self._special = {t["content"] for t in spec.get("added_tokens") or [] if "content" in t}

    @classmethod
    def load(cls, path: str | Path | None) -> TokenDecoder:
        """A decoder for a tokenizer.json; one that shows ids when path is None."""
        if path is None:
            return cls()
        try:
            from tokenizers import Tokenizer
        except ImportError:  # pragma: no cover - tokenizers is a dependency
            return cls()
        data = read_bytes(path, MAX_JSON_BYTES)  # a regular file of bounded size
        try:
            tok = Tokenizer.from_str(data.decode("utf-8"))
        except Exception as e:  # noqa: BLE001 - any parse failure is an input error
            raise InputError(
                path, None, f"not a readable tokenizer.json: {one_line(str(e))}"
            ) from e
        return cls(tok, str(path))

    @property
    def has_text(self) -> bool:
        return self._tok is not None

    def raw(self, token_id: int) -> str | None:
        """The token's text, or None when there is no tokenizer or the id is outside its vocab."""
        token_id = int(token_id)
        if token_id in self._raw:
            return self._raw[token_id]
        text = self._decode(token_id)
        self._raw[token_id] = text
        return text

    def _decode(self, token_id: int) -> str | None:
        tok = self._tok
        if tok is None or token_id < 0:
            return None
        piece = tok.id_to_token(token_id)  # type: ignore[attr-defined]
        if piece is None:
            return None
        if piece in self._special:
            return piece
        if self._byte_level:
            table = _byte_decoder()
            if all(ch in table for ch in piece):
                data = bytes(table[ch] for ch in piece)
                return data.decode("utf-8", errors="backslashreplace")
            return piece
        if piece.startswith("<0x") and piece.endswith(">") and len(piece) == 6:
            try:  # SentencePiece byte fallback, e.g. <0x0A>
                return bytes([int(piece[3:5], 16)]).decode("utf-8", errors="backslashreplace")
            except ValueError:
                return piece
        if self._metaspace:
            return piece.replace("▁", " ")
        text = tok.decode([token_id], skip_special_tokens=False)  # type: ignore[attr-defined]
        return text if text else piece

    def visible(self, token_id: int) -> str:
        """Text with whitespace made visible (space ·, newline ⏎, tab →); the id without a tokenizer."""
        token_id = int(token_id)
        v = self._visible.get(token_id)
        if v is None:
            raw = self.raw(token_id)
            v = str(token_id) if raw is None else make_visible(raw)
            self._visible[token_id] = v
        return v

    def ends_line(self, token_id: int) -> bool:
        raw = self.raw(token_id)
        return raw is not None and raw.endswith("\n")
