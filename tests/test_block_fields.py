"""The rules every block draft layout shares (`formats.block_fields`), on config dicts alone."""

from __future__ import annotations

import pytest

from inspector.draft import BlockConfig, RopeConfig
from inspector.errors import InputError
from inspector.formats.block_fields import (
    DecoderFields,
    block_draft_config,
    read_block_size,
    read_mask_token_id,
)
from inspector.formats.config import ConfigReader


def _reader(**kv) -> ConfigReader:
    return ConfigReader("draft/config.json", kv)


@pytest.mark.parametrize("mask", [0, 255])
def test_a_mask_token_inside_the_vocabulary_is_read(mask):
    assert read_mask_token_id(_reader(mask_token_id=mask), 256, _reader(), "m") == mask


@pytest.mark.parametrize("mask", [-1, 256, True, 1.0, "3"])
def test_a_mask_token_outside_the_vocabulary_or_not_an_int_names_the_field(mask):
    with pytest.raises(InputError) as e:
        read_mask_token_id(_reader(mask_token_id=mask), 256, _reader(), "m")
    assert str(e.value) == (
        f"draft/config.json: mask_token_id: expected a token id in [0, 256), got {mask!r}"
    )


def test_a_missing_mask_token_is_named_by_the_layouts_key():
    with pytest.raises(InputError) as e:
        read_mask_token_id(_reader(), 256, _reader(), "dflash_config.mask_token_id")
    assert str(e.value) == (
        "draft/config.json: dflash_config.mask_token_id: missing: every block row but the "
        "first is fed it"
    )


def test_block_size_two_is_the_smallest_and_absent_is_the_layouts_default():
    assert read_block_size(_reader(block_size=2), 16) == 2
    assert read_block_size(_reader(), 8) == 8
    with pytest.raises(InputError, match=r"block_size: 1: a block drafts block_size - 1 tokens"):
        read_block_size(_reader(block_size=1), 16)


def _decoder() -> DecoderFields:
    return DecoderFields(
        hidden_size=64,
        target_hidden_size=96,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        head_dim_explicit=False,
        intermediate_size=128,
        rms_norm_eps=1e-6,
        rope=RopeConfig(theta=5e5),
        vocab_size=256,
        num_layers=2,
    )


def _block(ids=(0, 3, 5)) -> BlockConfig:
    return BlockConfig(
        family="dflash",
        layer_ids=ids,
        layer_ids_source="config",
        num_target_layers=None,
        block_size=4,
        mask_token_id=1,
        causal=(False, False),
    )


def test_the_block_draft_config_reads_one_fc_block_per_target_layer_in_hf_numbering():
    cfg = block_draft_config(_decoder(), _block((2, 5)), (None, None))
    assert (cfg.num_fc_blocks, cfg.aux_layer_ids, cfg.aux_layer_convention) == (2, (3, 6), "hf")
    assert (cfg.vocab_size, cfg.draft_vocab_size, cfg.source_format) == (256, 256, "dflash")
    assert (cfg.hidden_size, cfg.target_hidden_size, cfg.num_kv_heads) == (64, 96, 2)
    assert (cfg.head_dim, cfg.head_dim_explicit, cfg.intermediate_size) == (16, False, 128)
    assert (cfg.num_layers, cfg.num_heads, cfg.rms_norm_eps) == (2, 4, 1e-6)
    assert cfg.rope == RopeConfig(theta=5e5)
    assert cfg.block == _block((2, 5)) and cfg.sliding_windows == ()


def test_a_window_on_any_layer_keeps_every_layers_window():
    assert block_draft_config(_decoder(), _block(), (None, 32)).sliding_windows == (None, 32)
