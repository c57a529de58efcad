"""INPUT for `capture`: prompts and conversations to run the target on, as token ids + loss masks.

A JSONL file holds one sample a line, in one of four forms:

- ``{"input_ids": [...], "loss_mask": [...]}``: exact ids (``loss_mask`` optional: all ones);
- ``{"text": "..."}``: tokenized as is, every token counts;
- ``{"prompt": "...", "response": "..."}``: the loss mask covers the response;
- ``{"messages": [{"role": ..., "content": ...}, ...]}``: the tokenizer's chat template; the loss
  mask covers the assistant turns.

A ``.txt`` file is one text, cut into samples of ``max_length`` tokens.

Each record also knows its prompt (what ``--generate`` continues): the tokens before the first
masked one (for ``prompt``/``response`` and ``messages``: the conversation up to the answer).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inspector.errors import InputError, setting_field
from inspector.sample import check_category

MIN_TOKENS = 3  # the sample readers need a token, its successor and one to predict
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


@dataclass
class Record:
    """One sample to capture: ``ids`` with ``mask`` (1 = counts), and its prompt for --generate."""

    ids: list[int]
    mask: list[int]
    prompt: list[int]
    where: str  # "FILE:LINE" for messages
    # the line's "category" (SPEED-Bench's field: coding, math, ...), written into the sample
    category: str | None = None


def has_tokenizer(target: Path) -> bool:
    return any((Path(target) / f).is_file() for f in TOKENIZER_FILES)


def load_tokenizer(target: Path) -> Any:
    """The target's tokenizer via transformers (never remote code); InputError when it has none."""
    target = Path(target)
    if not has_tokenizer(target):
        raise InputError(
            target,
            "tokenizer",
            f"no tokenizer files ({', '.join(TOKENIZER_FILES)}): text needs one; give exact "
            'ids as {"input_ids": [...]} lines instead',
        )
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(target), trust_remote_code=False)
    except Exception as e:  # noqa: BLE001 - transformers raises many types for a bad folder
        raise InputError(target, "tokenizer", f"cannot load: {_first_line(e)}") from e


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


class _Reader:
    """Turns lines into Records; the tokenizer is loaded on the first line that needs it."""

    def __init__(self, path: Path, target: Path, vocab_size: int, max_length: int) -> None:
        self.path, self.target = path, target
        self.vocab_size, self.max_length = vocab_size, max_length
        self._tok: Any = None
        self.truncated = 0

    @property
    def tok(self) -> Any:
        if self._tok is None:
            self._tok = load_tokenizer(self.target)
        return self._tok

    def encode(self, text: str, *, special: bool) -> list[int]:
        return list(self.tok(text, add_special_tokens=special)["input_ids"])

    def record(self, ids: list[int], mask: list[int], prompt: list[int], where: str) -> Record:
        if len(ids) > self.max_length:
            ids, mask = ids[: self.max_length], mask[: self.max_length]
            prompt = prompt[: self.max_length]
            self.truncated += 1
        return Record(ids, mask, prompt, where)

    def line(self, obj: Any, where: str) -> Record:
        if not isinstance(obj, dict):
            raise InputError(where, None, f"expected a JSON object, got {type(obj).__name__}")
        rec = self._line(obj, where)
        if "category" in obj:
            rec.category = check_category(obj["category"], where, "category")
        return rec

    def _line(self, obj: dict, where: str) -> Record:
        if "input_ids" in obj:
            return self._ids(obj, where)
        if "messages" in obj:
            return self._messages(obj["messages"], where)
        if "prompt" in obj or "response" in obj:
            prompt, response = _str(obj, "prompt", where), _str(obj, "response", where)
            p = self.encode(prompt, special=True)
            r = self.encode(response, special=False)
            return self.record(p + r, [0] * len(p) + [1] * len(r), p, where)
        if "text" in obj:
            ids = self.encode(_str(obj, "text", where), special=True)
            return self.record(ids, [1] * len(ids), ids, where)
        keys = ", ".join(sorted(map(str, obj))) or "none"
        raise InputError(
            where,
            None,
            f"no input_ids, text, prompt/response or messages key (keys: {keys})",
        )

    def _ids(self, obj: dict, where: str) -> Record:
        ids = obj["input_ids"]
        if not isinstance(ids, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in ids
        ):
            raise InputError(where, "input_ids", "expected a list of integers")
        bad = [i for i in ids if i < 0 or i >= self.vocab_size]
        if bad:
            raise InputError(
                where,
                "input_ids",
                f"id {bad[0]} out of range [0, {self.vocab_size}) of the target's vocabulary",
            )
        mask = obj.get("loss_mask")
        if mask is None:
            mask = [1] * len(ids)
        elif not isinstance(mask, list) or not all(m in (0, 1) for m in mask):
            raise InputError(where, "loss_mask", "expected a list of 0/1")
        elif len(mask) != len(ids):
            raise InputError(where, "loss_mask", f"{len(mask)} entries for {len(ids)} input_ids")
        first = next((i for i, m in enumerate(mask) if m), len(ids))
        return self.record(list(ids), [int(m) for m in mask], list(ids[: first or len(ids)]), where)

    def _render(self, messages: list, where: str, *, generation: bool) -> str:
        try:
            return self.tok.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=generation
            )
        except Exception as e:  # noqa: BLE001 - jinja and transformers errors alike
            if not getattr(self.tok, "chat_template", None):
                raise InputError(
                    self.target, "chat_template", "the tokenizer has none: messages need one"
                ) from e
            raise InputError(where, "messages", f"chat template failed: {_first_line(e)}") from e

    def _messages(self, messages: Any, where: str) -> Record:
        if not isinstance(messages, list) or not messages:
            raise InputError(where, "messages", "expected a non-empty list of messages")
        for m in messages:
            if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                raise InputError(where, "messages", "every message needs a string 'role'")
        full = self._render(messages, where, generation=False)
        # Assistant spans as character ranges of the full rendering: each turn's text is what
        # rendering up to it adds after rendering the conversation before it with the
        # generation prompt. A template that rewrites earlier turns has no such spans.
        spans: list[tuple[int, int]] = []
        for i, m in enumerate(messages):
            if m["role"] != "assistant":
                continue
            before = self._render(messages[:i], where, generation=True) if i else ""
            upto = self._render(messages[: i + 1], where, generation=False)
            if not (full.startswith(upto) and upto.startswith(before)):
                raise InputError(
                    where,
                    "messages",
                    f"the chat template rewrites earlier turns (turn {i}), so assistant tokens "
                    "cannot be located: use prompt/response lines",
                )
            spans.append((len(before), len(upto)))
        enc = self.tok(full, add_special_tokens=False, return_offsets_mapping=True)
        ids = list(enc["input_ids"])
        # A token that overlaps an assistant span is the answer's (byte-level BPE merges the
        # space that ends "assistant: " into the answer's first token).
        mask = [int(any(s < b and e > a for a, b in spans)) for s, e in enc["offset_mapping"]]
        last_user = max((i for i, m in enumerate(messages) if m["role"] != "assistant"), default=-1)
        head = messages[: last_user + 1]
        prompt = (
            self.encode(self._render(head, where, generation=True), special=False) if head else ids
        )
        return self.record(ids, mask, prompt, where)


def _str(obj: dict, key: str, where: str) -> str:
    v = obj.get(key)
    if not isinstance(v, str):
        raise InputError(where, key, f"expected a string, got {type(v).__name__}")
    return v


def read_input(
    path: str | Path, target: str | Path, *, vocab_size: int, max_length: int
) -> tuple[list[Record], list[str]]:
    """The Records of INPUT (JSONL, or a .txt cut into ``max_length``-token samples) and notes.

    Samples longer than ``max_length`` are cut; ``target`` is where the tokenizer is loaded from
    when a line needs one.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(path, None, "input file not found")
    reader = _Reader(path, Path(target), vocab_size, max_length)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise InputError(path, None, f"not UTF-8 text ({e.reason} at byte {e.start})") from e
    records: list[Record] = []
    if path.suffix == ".txt":
        records = _text_chunks(reader, text)
    else:
        for n, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            where = f"{path}:{n}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise InputError(
                    where, None, f"not JSON ({e.msg}); INPUT is JSONL, or plain text in a .txt"
                ) from e
            records.append(reader.line(obj, where))
    if not records:
        raise InputError(path, None, "no samples in the file")
    for r in records:
        if len(r.ids) < MIN_TOKENS:
            raise InputError(
                r.where, "input_ids", f"{len(r.ids)} tokens; a sample needs at least {MIN_TOKENS}"
            )
    notes = []
    if reader.truncated:
        notes.append(f"{reader.truncated} samples cut to --max-length {max_length} tokens")
    return records, notes


def _text_chunks(reader: _Reader, text: str) -> list[Record]:
    body = reader.encode(text, special=False)
    # The specials the tokenizer puts around any text (a BOS for Llama, none for Qwen) start
    # every chunk, as they would start a prompt.
    head = reader.encode("", special=True)
    size = reader.max_length - len(head)
    if size < MIN_TOKENS:
        raise InputError(
            reader.path, setting_field("max-length"), f"{reader.max_length} is too short"
        )
    out = []
    for k, start in enumerate(range(0, len(body), size)):
        ids = head + body[start : start + size]
        if len(ids) >= MIN_TOKENS:
            out.append(Record(ids, [1] * len(ids), ids, f"{reader.path}:chunk {k}"))
    return out
