"""What every block draft layout (z-lab's DFlash reference, speculators' DFlash and DSpark)
reads the same way: the mask token every block row but the first is fed, the block size, and
the canonical `DraftConfig` its decoder's fields and `BlockConfig` make.

A layout's module reads its own keys and calls these, so that a rule (the block size's floor,
the mask token's range, the fields a block draft fixes) is written once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from inspector.draft import BlockConfig, DraftConfig, RopeConfig
from inspector.formats.config import ConfigReader


def read_mask_token_id(at: ConfigReader, vocab: int, missing: ConfigReader, key: str) -> int:
    """The mask token id from `at` (a token id below `vocab`); `missing`.error(`key`) names the
    field when no layout key holds it."""
    mask = at.get("mask_token_id")
    if mask is None:
        raise missing.error(key, "missing: every block row but the first is fed it")
    if isinstance(mask, bool) or not isinstance(mask, int) or not 0 <= mask < vocab:
        raise at.error("mask_token_id", f"expected a token id in [0, {vocab}), got {mask!r}")
    return int(mask)


def read_block_size(at: ConfigReader, default: int) -> int:
    """The block size from `at` (the layout's `default` when absent): a block drafts
    block_size - 1 tokens, so at least 2."""
    size = at.positive_int("block_size", default)
    if size < 2:
        raise at.error("block_size", f"{size}: a block drafts block_size - 1 tokens, at least one")
    return size


@dataclass(frozen=True)
class DecoderFields:
    """The block draft's decoder as its layout's keys give it (the fields `DraftConfig` takes
    as read; `block_draft_config` adds the ones every block draft fixes)."""

    hidden_size: int
    target_hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    head_dim_explicit: bool
    intermediate_size: int
    rms_norm_eps: float
    rope: RopeConfig
    vocab_size: int
    num_layers: int


def block_draft_config(
    decoder: DecoderFields, block: BlockConfig, windows: Sequence[int | None]
) -> DraftConfig:
    """The canonical config of a block draft: its decoder, its full vocabulary (no d2t/t2d), one
    fc block per target layer its `block` reads (HF numbering), and each layer's window
    (none at all: no sliding window)."""
    return DraftConfig(
        hidden_size=decoder.hidden_size,
        target_hidden_size=decoder.target_hidden_size,
        num_heads=decoder.num_heads,
        num_kv_heads=decoder.num_kv_heads,
        head_dim=decoder.head_dim,
        intermediate_size=decoder.intermediate_size,
        rms_norm_eps=decoder.rms_norm_eps,
        rope=decoder.rope,
        vocab_size=decoder.vocab_size,
        draft_vocab_size=decoder.vocab_size,
        num_layers=decoder.num_layers,
        num_fc_blocks=len(block.hf_layer_ids),
        aux_layer_ids=block.hf_layer_ids,
        aux_layer_convention="hf",
        source_format="dflash",
        head_dim_explicit=decoder.head_dim_explicit,
        sliding_windows=tuple(windows) if any(w is not None for w in windows) else (),
        block=block,
    )
