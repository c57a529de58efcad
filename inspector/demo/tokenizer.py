"""A byte-level BPE tokenizer trained on the demo corpus (vocab 512: small enough for a tiny model,
large enough that tokens are about two characters)."""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

EOS = "<|endoftext|>"


def train_tokenizer(texts: Iterable[str], vocab_size: int = 512) -> Tokenizer:
    """Train a byte-level BPE tokenizer; the only special token is ``<|endoftext|>`` (id 0)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        # All 256 bytes up front: any text encodes, nothing maps to an unknown token.
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer=trainer)
    return tok


def encode_documents(tok: Tokenizer, docs: list[str]) -> list[list[int]]:
    """Token ids of each document, in order."""
    return [e.ids for e in tok.encode_batch(docs)]
