"""inspector.formats.tokenizer beyond the app tests: SentencePiece-style pieces, byte fallback,
nested decoder sequences, special tokens, the caches, and where a tokenizer.json is looked for."""

from __future__ import annotations

from pathlib import Path

import pytest

from inspector.errors import InputError
from inspector.formats.tokenizer import TokenDecoder, find_tokenizer, make_visible


def _metaspace(path: Path, *, nested: bool) -> Path:
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    vocab = {"<unk>": 0, "▁hello": 1, "<0x0A>": 2, "world": 3, "<0xZZ>": 4, "▁": 5, "a\tb": 6}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    meta = pre_tokenizers.Metaspace()
    tok.pre_tokenizer = pre_tokenizers.Sequence([meta]) if nested else meta
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    )
    tok.add_special_tokens([AddedToken("<s>", special=True)])
    tok.save(str(path))
    return path


@pytest.mark.parametrize("nested", [False, True])
def test_sentencepiece_pieces(tmp_path: Path, nested: bool) -> None:
    path = _metaspace(tmp_path / "sp.json", nested=nested)
    d = TokenDecoder.load(path)
    assert d.source == str(path) and d.has_text
    assert d.raw(1) == " hello"  # the leading space a lone decode would drop
    assert d.raw(2) == "\n" and d.ends_line(2) and not d.ends_line(1)
    assert d.raw(4) == "<0xZZ>"  # not a byte: the piece itself
    assert d.raw(3) == "world" and d.raw(5) == " "
    special = 7
    assert d.raw(special) == "<s>"
    assert d.raw(-1) is None and d.raw(10_000) is None
    assert d.visible(1) == "·hello" and d.visible(2) == "⏎" and d.visible(6) == "a→b"
    assert d.visible(-3) == "-3" and d.visible(10_000) == "10000"


def test_decoder_caches_its_answers(tmp_path: Path) -> None:
    d = TokenDecoder.load(_metaspace(tmp_path / "sp.json", nested=False))
    calls: list[int] = []
    real = d._decode

    def counting(i: int) -> str | None:
        calls.append(i)
        return real(i)

    d._decode = counting  # type: ignore[method-assign]
    assert d.visible(1) == d.visible(1) == "·hello"
    assert d.raw(1) == " hello" and d.raw(2) == "\n" and d.raw(2) == "\n"
    assert calls == [1, 2]


def test_no_tokenizer_shows_ids() -> None:
    d = TokenDecoder.load(None)
    assert not d.has_text and d.source is None
    assert d.raw(5) is None and d.visible(5) == "5" and not d.ends_line(5)
    assert TokenDecoder().visible(7) == "7"


def test_find_tokenizer_next_to_a_file_and_explicit_files(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "model.safetensors").write_bytes(b"")
    tok = _metaspace(ckpt / "tokenizer.json", nested=False)
    # a checkpoint given as a file: its folder is searched
    assert find_tokenizer(None, ckpt / "model.safetensors", None) == tok
    assert find_tokenizer(tok) == tok  # an explicit file
    assert find_tokenizer(str(ckpt)) == tok  # an explicit folder, as a string
    assert find_tokenizer(None, None, None) is None
    with pytest.raises(InputError) as e:
        find_tokenizer(tmp_path)
    assert str(e.value) == f"{tmp_path}: no tokenizer.json here"


def test_make_visible_controls() -> None:
    assert make_visible("\x7f\x1f") == "\\x7f\\x1f"
    assert make_visible("é ") == "é·"


class _FakeTokenizer:
    """Just what TokenDecoder calls on a `tokenizers.Tokenizer`, over a fixed vocabulary."""

    def __init__(self, spec: dict, pieces: dict[int, str], decoded: dict[int, str] | None = None):
        self.spec, self.pieces, self.decoded = spec, pieces, decoded or {}
        self.decode_calls: list[tuple[list[int], bool]] = []

    def to_str(self) -> str:
        import json

        return json.dumps(self.spec)

    def id_to_token(self, i: int) -> str | None:
        return self.pieces.get(i)

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        self.decode_calls.append((ids, skip_special_tokens))
        return "" if skip_special_tokens else self.decoded.get(ids[0], "")


@pytest.mark.parametrize(
    "spec,kind",
    [
        ({"decoder": {"type": "ByteLevel"}}, "byte"),
        ({"pre_tokenizer": {"type": "ByteLevel"}}, "byte"),
        ({"decoder": {"type": "Sequence", "decoders": [{"type": "ByteLevel"}]}}, "byte"),
        ({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "ByteLevel"}]}}, "byte"),
        ({"pre_tokenizer": {"type": "Sequence", "normalizers": [{"type": "ByteLevel"}]}}, "byte"),
        ({"decoder": {"type": "Metaspace"}}, "meta"),
        ({"pre_tokenizer": {"type": "Metaspace"}}, "meta"),
        (
            {
                "decoder": {
                    "type": "Sequence",
                    "decoders": [{"type": "Strip"}, {"type": "Metaspace"}],
                }
            },
            "meta",
        ),
        (
            {
                "decoder": {"type": "Sequence", "decoders": [{"type": "Strip"}]},
                "pre_tokenizer": None,
            },
            "plain",
        ),
        ({"decoder": {"type": "WordPiece"}, "pre_tokenizer": {"type": "Whitespace"}}, "plain"),
    ],
)
def test_piece_styles_are_detected(spec: dict, kind: str) -> None:
    pieces = {0: "Ġa", 1: "▁b", 2: "<0x0A>"}
    fake = _FakeTokenizer(spec, pieces, decoded={0: "plain-a", 1: "plain-b"})
    d = TokenDecoder(fake, "src")
    assert d.source == "src"
    expect = {
        "byte": (" a", "▁b"),  # "Ġ" is the byte-level stand-in for a space
        "meta": ("Ġa", " b"),
        "plain": ("plain-a", "plain-b"),
    }[kind]
    assert (d.raw(0), d.raw(1)) == expect
    # a byte-fallback piece is one byte, except to byte-level BPE, where it is plain text
    assert d.raw(2) == ("<0x0A>" if kind == "byte" else "\n")
    if kind == "plain":
        assert fake.decode_calls[0] == ([0], False)  # special tokens are not skipped


def test_byte_pieces_and_fallbacks() -> None:
    spec = {"added_tokens": [{"content": "<|eot|>"}, {"id": 9}]}
    pieces = {0: "<0xC3>", 1: "<0xZZ>", 2: "<0x0A0>", 3: "<|eot|>", 4: "empty", 5: "<0X0A>"}
    d = TokenDecoder(_FakeTokenizer(spec, pieces, decoded={2: "two", 3: "not special"}), None)
    assert d.raw(0) == "\\xc3"  # half a character: an escape, not U+FFFD
    assert d.raw(1) == "<0xZZ>" and d.raw(2) == "two"
    assert d.raw(3) == "<|eot|>" and d.raw(4) == "empty"  # decoded to nothing: the piece
    assert d.raw(5) == "<0X0A>"
    assert d.raw(99) is None and d.visible(99) == "99"
    byte = TokenDecoder(
        _FakeTokenizer({"decoder": {"type": "ByteLevel"}}, {0: "a€", 1: "Ã©", 2: "Ã"}), None
    )
    assert byte.raw(0) == "a€"  # not all byte-level characters: shown as stored
    assert byte.raw(1) == "é" and byte.raw(2) == "\\xc3"


def test_make_visible_keeps_printable_characters() -> None:
    assert make_visible("!\x80~") == "!\x80~"
    assert make_visible("\x1f") == "\\x1f"


def test_unreadable_tokenizer_message(tmp_path: Path) -> None:
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{\n}")
    with pytest.raises(InputError) as e:
        TokenDecoder.load(bad)
    assert str(e.value).startswith(f"{bad}: not a readable tokenizer.json: ")
    assert "\n" not in str(e.value)
