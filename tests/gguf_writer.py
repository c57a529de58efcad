"""llama.cpp's EAGLE-3 converter, mirrored with gguf's own GGUFWriter: `write_eagle3_gguf` writes a
draft folder as a GGUF exactly as `convert_hf_to_gguf.py` (llama.cpp@0c1e57098, as
llama-cpp-python 0.3.36 vendors it) writes it, for the tensors and keys of these drafts.
test_formats_gguf.py holds it to what the real converter wrote for the demo draft. Imported as
`gguf_writer` (like `support`); a module importing it is skipped without the gguf package.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from support import ROOT

from inspector.formats.gguf_rope import converter_llama3_factors

gguf = pytest.importorskip("gguf")

DEMO = ROOT / "assets" / "demo"
DRAFT, TARGET, HELD = DEMO / "draft", DEMO / "target", DEMO / "samples" / "held"
Q = gguf.GGMLQuantizationType

# HF name (after the converter's `layers.0.` / `midlayer.` -> `model.layers.0.` renaming) -> GGUF
# name: gguf-py's tensor_mapping.py for the llama names, conversion/llama.py `modify_tensors` for
# the eagle3 ones (fc, hidden_norm -> ATTN_NORM_2, input_norm -> ENC_OUTPUT_NORM).
NAMES = {
    "embed_tokens.weight": "token_embd.weight",
    "lm_head.weight": "output.weight",
    "norm.weight": "output_norm.weight",
    "fc.weight": "fc.weight",
    "input_norm.weight": "enc.output_norm.weight",
    "model.layers.0.input_layernorm.weight": "blk.0.attn_norm.weight",
    "model.layers.0.hidden_norm.weight": "blk.0.attn_norm_2.weight",
    "model.layers.0.self_attn.q_proj.weight": "blk.0.attn_q.weight",
    "model.layers.0.self_attn.k_proj.weight": "blk.0.attn_k.weight",
    "model.layers.0.self_attn.v_proj.weight": "blk.0.attn_v.weight",
    "model.layers.0.self_attn.o_proj.weight": "blk.0.attn_output.weight",
    "model.layers.0.post_attention_layernorm.weight": "blk.0.ffn_norm.weight",
    "model.layers.0.mlp.gate_proj.weight": "blk.0.ffn_gate.weight",
    "model.layers.0.mlp.up_proj.weight": "blk.0.ffn_up.weight",
    "model.layers.0.mlp.down_proj.weight": "blk.0.ffn_down.weight",
}
_FILE_TYPES = {Q.F32: 0, Q.F16: 1, Q.Q8_0: 7, Q.BF16: 32}  # gguf.LlamaFileType.ALL_F32, ...


def converter_permute(w: np.ndarray, n_head: int, n_head_kv: int | None) -> np.ndarray:
    """conversion/llama.py `LlamaModel.permute`, verbatim in numpy."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (
        w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


def converter_metadata(draft: Path, target: Path, qtype) -> list[tuple[str, str, object]]:
    """(key, GGUF type, value) in the converter's order: `LlamaModel.__init__` (eagle3 keys,
    conversion/llama.py lines 49-104), `TextModel.set_gguf_parameters` (conversion/base.py lines
    1434-1534), `LlamaModel.set_gguf_parameters` (llama.py 164-174)."""
    raw = json.loads((draft / "config.json").read_text())
    hp = {**raw, **raw.get("transformer_layer_config", {})}  # index_tensors, llama.py 211-213
    tc = json.loads((target / "config.json").read_text())
    tc = {**tc, **tc.get("text_config", {})}
    n = tc["num_hidden_layers"]
    layers = raw.get("eagle_aux_hidden_state_layer_ids") or [2, n // 2, n - 3]
    ht = (
        raw["target_hidden_size"]
        if raw.get("target_hidden_size") is not None
        else tc["hidden_size"]
    )
    rope = hp.get("rope_parameters") or {"rope_theta": hp.get("rope_theta", 10000.0)}
    meta = [
        ("eagle3.target_layers", "ARRAY[INT32]", list(layers)),
        ("eagle3.target_hidden_size", "UINT32", ht),
        ("eagle3.norm_before_residual", "BOOL", raw.get("norm_before_residual", False)),
        ("eagle3.norm_before_fc", "BOOL", raw.get("norm_before_fc", False)),
        ("general.type", "STRING", "model"),
        ("general.name", "STRING", "Draft"),
        ("eagle3.block_count", "UINT32", hp["num_hidden_layers"]),
        ("eagle3.context_length", "UINT32", hp["max_position_embeddings"]),
        ("eagle3.embedding_length", "UINT32", hp["hidden_size"]),
        ("eagle3.feed_forward_length", "UINT32", hp["intermediate_size"]),
        ("eagle3.attention.head_count", "UINT32", hp["num_attention_heads"]),
        ("eagle3.attention.head_count_kv", "UINT32", hp["num_key_value_heads"]),
    ]
    kind = rope.get("rope_type")
    if kind == "linear":
        meta += [
            ("eagle3.rope.scaling.type", "STRING", "linear"),
            ("eagle3.rope.scaling.factor", "FLOAT32", rope["factor"]),
        ]
    elif kind == "yarn":
        meta += [
            ("eagle3.rope.scaling.type", "STRING", "yarn"),
            ("eagle3.rope.scaling.factor", "FLOAT32", rope["factor"]),
            (
                "eagle3.rope.scaling.original_context_length",
                "UINT32",
                rope["original_max_position_embeddings"],
            ),
        ]
    meta += [
        ("eagle3.rope.freq_base", "FLOAT32", rope["rope_theta"]),
        ("eagle3.attention.layer_norm_rms_epsilon", "FLOAT32", hp["rms_norm_eps"]),
    ]
    if hp.get("head_dim") is not None:
        meta += [
            ("eagle3.attention.key_length", "UINT32", hp["head_dim"]),
            ("eagle3.attention.value_length", "UINT32", hp["head_dim"]),
        ]
    rope_dim = hp.get("head_dim") or hp["hidden_size"] // hp["num_attention_heads"]
    meta += [
        ("general.file_type", "UINT32", _FILE_TYPES[qtype]),
        ("eagle3.vocab_size", "UINT32", hp["vocab_size"]),
        ("eagle3.rope.dimension_count", "UINT32", rope_dim),
        ("general.quantization_version", "UINT32", 2),
    ]
    return meta


def converter_tensors(draft: Path, target: Path, qtype) -> list[tuple[str, np.ndarray, object]]:
    """(GGUF name, data, GGML type) in the converter's order: `generate_extra_tensors` first
    (llama3's rope_freqs, llama.py 298-326), then the draft's tensors by name with
    `modify_tensors` (llama.py 232-296: d2t held back, t2d dropped, hidden_norm -> attn_norm_2,
    Q and K permuted), the type chosen as in `ModelBase.prepare_tensors` (base.py 1081-1167: 1-D
    and *_norm.weight tensors F32, the rest the --outtype, QuantError -> F16), and d2t last as
    absolute I64 target ids (llama.py 338-356)."""
    raw = json.loads((draft / "config.json").read_text())
    hp = {**raw, **raw.get("transformer_layer_config", {})}
    tc = json.loads((target / "config.json").read_text())
    target_vocab = {**tc, **tc.get("text_config", {})}["vocab_size"]
    nh, nkv = hp["num_attention_heads"], hp["num_key_value_heads"]
    out: list[tuple[str, np.ndarray, object]] = []
    rope = hp.get("rope_parameters") or {}
    if rope.get("rope_type") == "llama3":
        dim = hp.get("head_dim") or hp["hidden_size"] // nh
        factors = converter_llama3_factors(
            rope.get("rope_theta", 10000.0),
            dim,
            rope.get("factor", 8.0),
            rope.get("low_freq_factor", 1.0),
            rope.get("high_freq_factor", 4.0),
            rope.get("original_max_position_embeddings", 8192),
        )
        out.append(("rope_freqs.weight", factors.numpy(), Q.F32))
    weights = load_file(str(draft / "model.safetensors"))
    d2t = None
    for name in sorted(weights):
        data = weights[name].float().numpy()
        if name.startswith("layers.0."):
            name = "model." + name
        elif name.startswith("midlayer."):
            name = "model.layers.0." + name[len("midlayer.") :]
        if name == "d2t":
            d2t = weights["d2t"]
            continue
        if name == "t2d":
            continue
        if name.endswith("q_proj.weight"):
            data = converter_permute(data, nh, nh)
        if name.endswith("k_proj.weight"):
            data = converter_permute(data, nh, nkv)
        new = NAMES[name]
        kind = Q.F32 if data.ndim <= 1 or new.endswith("_norm.weight") else qtype
        try:
            stored = gguf.quants.quantize(data, kind)
        except gguf.QuantError:
            kind, stored = Q.F16, gguf.quants.quantize(data, Q.F16)
        out.append((new, stored, kind))
    if d2t is not None:
        ids = d2t.to(torch.int64).numpy().reshape(-1)
        ids = ids + np.arange(ids.size, dtype=np.int64)
        assert ids.min() >= 0 and ids.max() < target_vocab and np.unique(ids).size == ids.size
        out.append(("d2t", ids, Q.I64))
    return out


def write_eagle3_gguf(
    out: Path,
    qtype=Q.F32,
    *,
    draft: Path = DRAFT,
    target: Path = TARGET,
    keys: dict | None = None,
    tensors=None,
    arch: str = "eagle3",
) -> Path:
    """A GGUF of `draft` as llama.cpp's convert_hf_to_gguf.py writes it (see `converter_metadata`
    and `converter_tensors`), with gguf's GGUFWriter. `keys`: key -> (type, value) to add or
    replace, or None to leave out; `tensors(list)` edits the (name, data, type) list; `arch`
    the general.architecture written (the keys keep their eagle3. prefix)."""
    meta = converter_metadata(draft, target, qtype)
    for key, change in (keys or {}).items():
        meta = [m for m in meta if m[0] != key]
        if change is not None:
            meta.append((key, *change))
    items = converter_tensors(draft, target, qtype)
    if tensors is not None:
        items = tensors(items)
    w = gguf.GGUFWriter(str(out), arch)
    for name, data, kind in items:
        w.add_tensor(name, data, raw_dtype=kind)
    # ModelBase.prepare_metadata (base.py 1203-1211): the parameter count's label, after the name
    at = next(i for i, m in enumerate(meta) if m[0] == "general.name") + 1
    label = ("general.size_label", "STRING", gguf.size_label(*w.get_total_parameter_count()))
    meta.insert(at, label)
    for key, kind, value in meta:
        add = {
            "UINT32": w.add_uint32,
            "INT32": w.add_int32,
            "FLOAT32": w.add_float32,
            "BOOL": w.add_bool,
            "STRING": w.add_string,
            "ARRAY[INT32]": w.add_array,
        }[kind]
        add(key, value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out
