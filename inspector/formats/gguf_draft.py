"""llama.cpp's EAGLE-3 GGUF (arch `eagle3`) -> the canonical `Draft`.

What llama.cpp's converter writes for an EAGLE-3 draft (`convert_hf_to_gguf.py`, `LlamaModel` in
`conversion/llama.py`: `__init__`, `modify_tensors`, `prepare_tensors`) and its runtime reads
(`src/models/eagle3.cpp`, `src/llama-arch.cpp`), as of llama.cpp@0c1e57098 (vendored by
llama-cpp-python 0.3.36), mapped onto the canonical names (docs/formats.md, "llama.cpp GGUF"):

| GGUF | canonical |
|---|---|
| `eagle3.embedding_length`, `eagle3.feed_forward_length` | hidden_size, intermediate_size |
| `eagle3.attention.head_count`, `.head_count_kv` | num_heads, num_kv_heads (default: heads) |
| `eagle3.attention.key_length` (= `value_length`, = `eagle3.rope.dimension_count`) | head_dim (default: hidden / heads) |
| `eagle3.attention.layer_norm_rms_epsilon` | rms_norm_eps |
| `eagle3.rope.freq_base`, `eagle3.rope.scaling.*`, tensor `rope_freqs.weight` | RoPE theta (default 10000); linear / yarn; llama3 (see `gguf_rope.llama3_from_factors`) |
| `eagle3.vocab_size` | vocab_size V (the target's) |
| `eagle3.target_hidden_size` | target_hidden_size |
| `eagle3.target_layers` (other versions of PR #18039's code and forks: `eagle3.extract_layers`) | aux_layer_ids, convention "llama.cpp": id i = the input of target layer i = HF index i |
| `eagle3.norm_before_residual`, `eagle3.norm_before_fc` | the same flags (absent: false, as llama.cpp reads them) |
| `eagle3.fc_norm`, `eagle3.norm_output` (forks only) | the same flags |
| `eagle3.block_count` | must be 1: the eagle3 graph runs one decoder layer |
| `fc.weight` [H, N*Ht] | `fc.weight` |
| `token_embd.weight` [V, H] (optional: llama.cpp borrows the target's) | `embed_tokens.weight` (else --embed / --target) |
| `output.weight` [D, H] (optional since b9606: the target's lm_head) | `lm_head.weight` (else the target's rows of the draft vocab) |
| `output_norm.weight` | `norm.weight` |
| `blk.0.attn_norm.weight`, `blk.0.ffn_norm.weight` | `layers.0.input_layernorm`, `post_attention_layernorm` |
| `blk.0.attn_norm_2.weight` (those versions and forks: `blk.0.hidden_norm.weight`) | `layers.0.hidden_norm.weight` |
| `blk.0.attn_{q,k,v,output}.weight` | `layers.0.self_attn.{q,k,v,o}_proj.weight`, Q and K rows un-permuted |
| `blk.0.ffn_{gate,up,down}.weight` | `layers.0.mlp.{gate,up,down}_proj.weight` |
| `enc.output_norm.weight` (with `norm_before_fc`) | `input_norm.weight` |
| `fc_norm.{k}.weight` (forks, with `eagle3.fc_norm`) | `fc_norm.{k}.weight` |
| `d2t` [D] I64: ABSOLUTE target ids (d2t + arange); `t2d` is not written | `d2t` as offsets (ids - arange), t2d rebuilt |

The converter permutes the rows of Q and K for llama.cpp's RoPE, which rotates adjacent pairs
(`LlamaModel.permute`: per head, rows [2, hd/2] -> [hd/2, 2]); the inverse is applied here, so the
forward is the HF draft's. Tensors are read and dequantized with the `gguf` package only (F32,
F16, BF16, Q8_0, the K-quants, whatever `gguf.quants.dequantize` handles); F16 and BF16 weights
stay in their dtype (`Draft.stored_dtype`), quantized ones become float32.

Every failure is one `InputError` naming the file and the key or the tensor: a GGUF of another
architecture (`general.architecture`), a missing or ill-typed key, a tensor of the wrong shape or
type, a tensor llama.cpp's eagle3 graph does not read, and a file cut short (the key or tensor
where it ends). The file is opened read-only.

The work is split by what it reads: `gguf_file` (the file and its metadata), `gguf_config` (keys ->
DraftConfig), `gguf_rope` (RoPE keys, llama3's `rope_freqs.weight`), `gguf_tensors` (tensors ->
canonical weights); `draft_assembly` finishes the Draft as for every other layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from inspector.draft import Draft
from inspector.engines import Engine
from inspector.errors import InputError
from inspector.formats.config import ConfigReader
from inspector.formats.draft_assembly import assemble_draft
from inspector.formats.files import check_regular, one_line
from inspector.formats.gguf_config import LAYOUT, gguf_config
from inspector.formats.gguf_file import ARCH, ARCH_KEY, import_gguf, metadata, open_gguf
from inspector.formats.gguf_tensors import UNQUANTIZED, gguf_weights, target_lm_head

# the engines' names from the registry (a rename is one edit in inspector/engines/)
_LLAMACPP = Engine.LLAMACPP.display


@dataclass(frozen=True)
class GgufHeader:
    """What a GGUF draft states beside its weights: the `eagle3.` keys as Python values (absent
    keys absent: llama.cpp reads an absent flag as false) and every tensor's GGUF type."""

    keys: dict[str, object]
    tensor_types: dict[str, str]


def _open_eagle3(file: Path) -> tuple[Any, ConfigReader]:
    """The reader of an `eagle3` GGUF and its keys; another architecture is refused."""
    check_regular(file)
    import_gguf(file)
    reader = open_gguf(file)
    top = ConfigReader(file, metadata(reader, file))
    arch = top.get(ARCH_KEY)
    if arch is None:
        raise top.error(ARCH_KEY, "missing: not a model GGUF")
    if arch != ARCH:
        raise top.error(
            ARCH_KEY,
            f"{one_line(repr(arch))[:60]}: not an EAGLE-3 draft ({_LLAMACPP}'s converter writes "
            f"{ARCH!r} for one)",
        )
    return reader, top


def read_gguf_header(path: str | Path) -> GgufHeader:
    """The keys and tensor types of a llama.cpp EAGLE-3 GGUF, no tensor read."""
    reader, top = _open_eagle3(Path(path))
    types = {t.name: t.tensor_type.name for t in reader.tensors}
    return GgufHeader(dict(top.obj), types)


def load_gguf_draft(
    path: str | Path,
    *,
    embed: str | Path | None = None,
    target: str | Path | None = None,
    dtype: str | torch.dtype | None = None,
    device: str | torch.device = "cpu",
    strict: bool = True,
) -> Draft:
    """A llama.cpp EAGLE-3 GGUF as a canonical Draft (`load_draft` sends `.gguf` paths here)."""
    file = Path(path)
    reader, top = _open_eagle3(file)
    gguf = import_gguf(file)
    tensors = {t.name: t for t in reader.tensors}
    cfg = gguf_config(top, tensors, file)
    notes: list[str] = []
    weights, kinds = gguf_weights(gguf, tensors, cfg, file)
    if "lm_head.weight" not in weights:
        weights["lm_head.weight"] = target_lm_head(file, target, cfg, weights, notes)
    if "embed_tokens.weight" not in weights and embed is None and target is None:
        raise InputError(
            file,
            "token_embd.weight",
            f"absent ({_LLAMACPP} borrows the target's embedding): pass --target DIR or --embed "
            "FILE",
        )
    draft = assemble_draft(
        cfg,
        weights,
        file,
        embed=embed,
        target=target,
        dtype=dtype,
        device=device,
        strict=strict,
        notes=notes,
        name=file.name,
        path=str(file),
        layout=LAYOUT,
    )
    quantized = sorted(k for k in kinds if k not in UNQUANTIZED)
    if quantized and draft.dtype_note is None:
        draft.dtype_note = (
            f"the GGUF stores {', '.join(quantized)} weights: dequantized to float32 by gguf, "
            f"computed in {str(draft.dtype).removeprefix('torch.')}"
        )
    return draft
