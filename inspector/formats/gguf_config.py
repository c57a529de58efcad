"""A GGUF draft's metadata -> `DraftConfig`: the `eagle3.` keys llama.cpp's converter writes
(`LlamaModel.__init__` and `set_gguf_parameters` in conversion/llama.py), checked against what
llama.cpp's eagle3 graph can run (one decoder layer, RoPE over whole heads).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from inspector.draft import DraftConfig
from inspector.engines import Engine
from inspector.engines.capture import LLAMA_CPP
from inspector.errors import InputError
from inspector.formats.config import ConfigReader
from inspector.formats.gguf_file import ARCH
from inspector.formats.gguf_rope import ROPE_FREQS, gguf_rope
from inspector.formats.gguf_tensors import D2T

# the engines' names from the registry (a rename is one edit in inspector/engines/)
_LLAMACPP = Engine.LLAMACPP.display

# What aux_layer_convention records for a GGUF's ids: llama.cpp taps the input of target layer i
# (`t_layer_inp[i]`), HF hidden_states index i, and adds nothing to the ids it reads.
CONVENTION = LLAMA_CPP
LAYOUT = "gguf"
# The ids' key: llama.cpp@0c1e57098's converter and runtime (LLM_KV_TARGET_LAYERS), then the name
# other versions of PR #18039's code and the forks built on them use (LLM_KV_EAGLE3_EXTRACT_LAYERS).
LAYER_ID_KEYS = (f"{ARCH}.target_layers", f"{ARCH}.extract_layers")


def layer_ids_key(top: ConfigReader) -> str | None:
    """The key this GGUF keeps its target layer ids under (None: neither name)."""
    return next((key for key in LAYER_ID_KEYS if top.has(key)), None)


def gguf_config(top: ConfigReader, tensors: dict[str, Any], file: Path) -> DraftConfig:
    """The config the keys state; `tensors` (the GGUF's, by name) tell the draft vocab (d2t's
    length, else output.weight's rows) and hold llama3 RoPE's `rope_freqs.weight`."""
    k = ARCH + "."
    layers = top.positive_int(k + "block_count", 1)
    if layers != 1:
        raise top.error(
            k + "block_count",
            f"{layers}: {_LLAMACPP}'s eagle3 graph runs exactly one decoder layer",
        )
    h = top.positive_int(k + "embedding_length")
    nh = top.positive_int(k + "attention.head_count")
    nkv = top.positive_int(k + "attention.head_count_kv", nh)
    if nh % nkv:
        raise top.error(k + "attention.head_count_kv", f"{nkv} does not divide {nh} heads")
    if not top.has(k + "attention.key_length") and h % nh:
        raise top.error(k + "attention.key_length", f"absent, and {h} is not a multiple of {nh}")
    hd = top.positive_int(k + "attention.key_length", h // nh)
    for key, what in (
        ("attention.value_length", "a value width other than the key width"),
        ("rope.dimension_count", "RoPE over part of a head"),
    ):
        other = top.positive_int(k + key, hd)
        if other != hd:
            raise top.error(k + key, f"{other}, but head_dim is {hd}: {what} is not supported")
    ids_key = layer_ids_key(top)
    if ids_key is None:
        raise top.error(
            LAYER_ID_KEYS[0],
            f"missing (and no {LAYER_ID_KEYS[1]}, its earlier name): the target layers fc reads",
        )
    ids = top.int_list(ids_key, 0)
    assert ids is not None
    if not ids:
        raise top.error(ids_key, "empty: fc reads at least one target layer")
    ht = top.positive_int(k + "target_hidden_size")
    vocab = _vocab_size(top, tensors)
    d2t = tensors.get(D2T)
    output = tensors.get("output.weight")
    draft_vocab = vocab
    if d2t is not None:
        draft_vocab = int(np.prod([int(n) for n in d2t.shape]))
    elif output is not None and len(output.shape) == 2:
        draft_vocab = int(output.shape[1])
    if not 0 < draft_vocab <= vocab:
        raise InputError(file, D2T, f"{draft_vocab} draft ids for a target vocab of {vocab}")
    return DraftConfig(
        hidden_size=h,
        target_hidden_size=ht,
        num_heads=nh,
        num_kv_heads=nkv,
        head_dim=hd,
        intermediate_size=top.positive_int(k + "feed_forward_length"),
        rms_norm_eps=top.positive_number(k + "attention.layer_norm_rms_epsilon"),
        rope=gguf_rope(top, tensors.get(ROPE_FREQS), hd, file),
        vocab_size=vocab,
        draft_vocab_size=draft_vocab,
        num_layers=1,
        num_fc_blocks=len(ids),
        norm_before_residual=top.flag(k + "norm_before_residual"),
        norm_before_fc=top.flag(k + "norm_before_fc"),
        fc_norm=top.flag(k + "fc_norm"),
        norm_output=top.flag(k + "norm_output"),
        aux_layer_ids=ids,
        aux_layer_convention=CONVENTION,
        source_format=LAYOUT,
        head_dim_explicit=True,  # key_length absent means hidden / heads to llama.cpp: no trap
        norm_before_residual_explicit=top.has(k + "norm_before_residual"),
    )


def _vocab_size(top: ConfigReader, tensors: dict[str, Any]) -> int:
    """V: `eagle3.vocab_size` (the converter always writes it), else the embedding's rows."""
    key = ARCH + ".vocab_size"
    if top.has(key):
        return top.positive_int(key)
    embd = tensors.get("token_embd.weight")
    if embd is not None and len(embd.shape) == 2 and int(embd.shape[1]) > 0:
        return int(embd.shape[1])
    raise top.error(key, "missing, and no token_embd.weight to count the target vocab from")
