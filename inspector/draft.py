"""The canonical draft: one config and one set of tensor names, whatever layout it came from.

Every checkpoint adapter in `inspector.formats` produces a `Draft`; the forward pass in
`inspector.model` reads only this.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch


@dataclass(frozen=True)
class RopeConfig:
    """Rotary embedding settings of the draft (not of the target: the draft keeps its own theta)."""

    theta: float = 10000.0
    # rope_type: "default", "linear", "llama3", "yarn", ...; the keys of the scaling dict as stored.
    rope_type: str = "default"
    scaling: dict = field(default_factory=dict)
    # The dimension the inverse frequencies are spread over, when a trainer's differs from head_dim
    # (speculators builds its rotary table from a config copy with hidden_size doubled: without an
    # explicit head_dim, transformers then derives 2H/heads). None: head_dim, as every engine does.
    dim: int | None = None


@dataclass(frozen=True)
class MlaConfig:
    """Multi-head latent attention (DeepSeek-V2/V3, Kimi K2) of an MLA draft layer.

    q = q_b(norm(q_a(x))) (or q_proj(x) when q_lora_rank is None), split per head into a "nope"
    part and a "rope" part; kv_a(x) gives a compressed kv (normed, then kv_b: per-head k_nope and
    v) plus one rope key shared by every head. RoPE (interleaved pairs) touches only the rope dims.
    """

    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    # DeepSeek rotates adjacent pairs of the rope dims (true, the default, and every MLA draft
    # trainer's); transformers' `rope_interleave: false` rotates the halves, as Llama does.
    rope_interleave: bool = True
    # SpecForge PR 186's layout (told apart by its tensors): layer 0 projects [norm(embed) |
    # hidden_norm(fc out)] with `input_proj` (an RMSNorm over the 2H concat, then 2H -> H) and its
    # MLA attention reads H; its rotary table is plain theta over the rope dims (rope_scaling
    # reaches only the softmax scale). False: the later MLA draft, whose q_a / kv_a read the 2H.
    input_proj: bool = False

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim


@dataclass(frozen=True)
class ParallelConfig:
    """P-EAGLE's parallel drafting (docs/peagle.md): one forward drafts `num_depths` tokens; the
    slot at depth k >= 1 is fed `mask_token_id` and the learned `mask_hidden` (canonical tensor
    `mask_hidden` [N*Ht], in fc's input space) at position + k, attending to the context and to
    its own chain's earlier depths: TTT's mask, with no slot reading another slot's output."""

    mask_token_id: int
    num_depths: int = 8  # K, speculators' default (proposal_methods[0].speculative_tokens)


BLOCK_FAMILIES = ("dflash", "dflash2", "dspark")


@dataclass(frozen=True)
class BlockConfig:
    """A block draft (z-lab's DFlash and DFlash2; DSpark: DFlash's network with a Markov head on
    its logits): one forward drafts a whole block.

    The block is [last verified token, mask, ..., mask] (`block_size` rows, the mask token's
    embedding in every row but the first); its rows attend to the context keys and values (each
    draft layer's k/v projections of `hidden_norm(fc(context features))`, one row per verified
    position) and to each other, bidirectionally unless `causal` says so for that layer. The
    draft has no embedding or head of its own: the target's embedding (times
    `input_embedding_scale`) feeds it and the target's lm_head reads it (times
    `output_multiplier`, then `final_logit_softcapping`). Rows 1.. of the block are the drafts
    (every row where `anchor_drafts`).
    """

    family: str  # "dflash" | "dflash2" | "dspark"
    # The ids as the config writes them (or the reference's default): decoder-layer numbering,
    # the reference reads hidden_states[id + 1]. `hf_layer_ids` are the HF hidden_states indices.
    layer_ids: tuple[int, ...]
    layer_ids_source: str  # "config" (and which key: "dflash_config.target_layer_ids") or "default"
    num_target_layers: int | None
    block_size: int
    mask_token_id: int
    # Per draft layer: whether a block row sees only the rows before it (and itself).
    causal: tuple[bool, ...]
    # Where a sliding layer's window is measured from. False (z-lab's reference, vLLM): each
    # block row's own position, on both the context and the block's keys. True (speculators'
    # trainer, `create_anchor_block_mask_mod`): the block's anchor n, on the context keys only
    # (positions n - window .. n - 1); a block row sees its whole block. A draft is served with
    # the first, so a trained window reads further back than the served one by up to a block.
    window_from_anchor: bool = False
    input_embedding_scale: float = 1.0
    output_multiplier: float = 1.0
    final_logit_softcapping: float | None = None
    # DFlash2: the grouped dynamic causal convolutions around attention and MLP, and the
    # candidate selector that picks the proposed path among each row's top-k.
    conv_kernel_size: int | None = None
    conv_group_size: int | None = None
    selector_rank: int | None = None
    selector_top_k: int | None = None
    # Where the layout writes the ids and what it adds to the reference's numbering there:
    # z-lab's `dflash_config.target_layer_ids` as is, speculators' `aux_hidden_state_layer_ids`
    # + 1 (HF indices). The doctor's fix names that key, in that numbering.
    ids_key: str = "dflash_config.target_layer_ids"
    ids_offset: int = 0
    # The config field that marks the family, for a one-line refusal naming it.
    marker: str = "architectures"
    # DSpark's slots: whether block row 0 (the anchor's) drafts too. True (speculators' DSpark
    # default `sample_from_anchor`, DeepSeek's, vLLM's DSpark runner): row k drafts x_{n+k+1},
    # block_size drafts a round. False (the reference's, SpecForge's DSpark): rows 1.. draft,
    # row k drafts x_{n+k}. Either way draft j follows x_{n+j}; served with the other slots,
    # every draft is one position off (accept length about 1).
    anchor_drafts: bool = False
    # DSpark's Markov head: a low-rank bias W2(W1[previous token]) on each draft's logits
    # ("vanilla"; "gated" scales W1's row by a sigmoid of [hidden, W1 row]); None: no head.
    markov_rank: int | None = None
    markov_head_type: str | None = None
    # DSpark's confidence head: its input width (hidden, + markov_rank with the Markov row)
    confidence_input: int | None = None

    @property
    def drafts_per_block(self) -> int:
        """The tokens one block drafts: block_size, or block_size - 1 when the anchor's row
        only carries the last verified token."""
        return self.block_size if self.anchor_drafts else self.block_size - 1

    @property
    def hf_layer_ids(self) -> tuple[int, ...]:
        """The HF hidden_states index each fc block reads: id + 1 (0 is the embedding)."""
        return tuple(i + 1 for i in self.layer_ids)

    def written_ids(self, ids: tuple[int, ...] | list[int]) -> list[int]:
        """Ids in the reference's numbering as this layout writes them under `ids_key`."""
        return [i + self.ids_offset for i in ids]


@dataclass(frozen=True)
class DraftConfig:
    hidden_size: int
    target_hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    rope: RopeConfig
    vocab_size: int  # target vocab V
    draft_vocab_size: int  # D
    num_layers: int = 1
    num_fc_blocks: int = 3  # N: how many slots fc takes
    norm_before_residual: bool = False
    norm_before_fc: bool = False
    fc_norm: bool = False
    norm_output: bool = False
    # HF hidden_states indices of the slots fc was configured for, when the config says so.
    aux_layer_ids: tuple[int, ...] | None = None
    aux_layer_convention: str | None = None  # "hf" | "sglang" | "speculators<=0.4" ...
    source_format: str = "unknown"  # "speculators" | "specforge"
    # Whether head_dim was written in config.json (a missing one is a known trap, see doctor).
    head_dim_explicit: bool = True
    # Whether norm_before_residual was written: when absent, speculators reads false but vLLM's
    # speculators parser true, so a check may try both.
    norm_before_residual_explicit: bool = True
    # MLA draft attention (head_dim is then qk_nope + qk_rope, the q.k width); None: Llama's.
    mla: MlaConfig | None = None
    # Sliding-window size of each decoder layer, None where the layer attends to every earlier
    # row (an empty tuple: no layer slides).
    sliding_windows: tuple[int | None, ...] = ()
    # tie_word_embeddings: a draft without lm_head.weight reads its head from the embedding rows.
    tie_word_embeddings: bool = False
    # P-EAGLE (parallel drafting); None: EAGLE-3's sequential TTT steps.
    parallel: ParallelConfig | None = None
    # A block draft (DFlash, DFlash2): inspector.model.block runs it; None: EAGLE-3 / P-EAGLE.
    block: BlockConfig | None = None

    @property
    def rope_head_dim(self) -> int:
        """The dims RoPE rotates per head: all of head_dim, or MLA's rope part only."""
        return self.mla.qk_rope_head_dim if self.mla is not None else self.head_dim

    def sliding_window(self, layer: int) -> int | None:
        """The window of decoder layer `layer` (keys at most window-1 rows back), or None."""
        if layer < len(self.sliding_windows):
            return self.sliding_windows[layer]
        return None


@dataclass
class VocabMap:
    """Draft <-> target vocabulary. d2t holds offsets: target_id = draft_id + d2t[draft_id]."""

    d2t: torch.Tensor  # int64 [D]
    t2d: torch.Tensor  # bool [V]

    @classmethod
    def identity(cls, vocab_size: int) -> VocabMap:
        return cls(
            d2t=torch.zeros(vocab_size, dtype=torch.long),
            t2d=torch.ones(vocab_size, dtype=torch.bool),
        )

    @property
    def draft_to_target(self) -> torch.Tensor:
        """Absolute target id of every draft id, [D]."""
        return torch.arange(self.d2t.numel(), device=self.d2t.device) + self.d2t

    @property
    def target_to_draft(self) -> torch.Tensor:
        """Draft id of every target id, -1 where the token is outside the draft vocab, [V]."""
        out = torch.full((self.t2d.numel(),), -1, dtype=torch.long, device=self.t2d.device)
        out[self.draft_to_target] = torch.arange(self.d2t.numel(), device=self.d2t.device)
        return out

    def to(self, device: torch.device | str) -> VocabMap:
        return VocabMap(d2t=self.d2t.to(device), t2d=self.t2d.to(device))


@dataclass(frozen=True)
class StoredVocab:
    """d2t and t2d exactly as the checkpoint stores them (None: not stored), before the loader
    repairs or fills in anything: what a check of the stored map must look at."""

    d2t: torch.Tensor | None
    t2d: torch.Tensor | None


@dataclass(frozen=True)
class Quantization:
    """How a quantized draft's weights were stored, read and dequantized at load
    (`inspector.formats.quantized`): the canonical weights hold `scale * stored` in float32.

    method: "fp8" (the only one read). format: what declared it ("modelopt", "compressed-tensors",
    or "scales only" where no config names it). weight_dtype: the stored element type
    ("float8_e4m3fn"). granularity: "per-tensor", "per-channel" or "mixed". tensors: the canonical
    names dequantized. input_scales: activation scales stored beside them (static input
    quantization, which the forward does not apply: it runs the activations unquantized).
    unquantized_dtype: see below.
    """

    method: str
    format: str
    weight_dtype: str
    granularity: str
    tensors: tuple[str, ...]
    input_scales: int = 0
    # the dtype of the floating tensors stored unquantized (the norms, the head; typically
    # bfloat16): the draft's stored dtype, which the compute dtype follows, not the float32 the
    # dequantized weights are held in (None: every floating tensor was FP8)
    unquantized_dtype: torch.dtype | None = None

    @property
    def label(self) -> str:
        return f"{self.method} ({self.weight_dtype}, {self.granularity}, {self.format})"

    def to_dict(self) -> dict:
        return {
            "method": self.method,
            "format": self.format,
            "weight_dtype": self.weight_dtype,
            "granularity": self.granularity,
            "tensors": list(self.tensors),
            "input_scales": self.input_scales,
        }


def dtype_label(computed: str, stored: str | None) -> str:
    """For header lines: the compute dtype, and the stored one where it differs
    (`float32 (stored bfloat16)`)."""
    return computed if stored is None or stored == computed else f"{computed} (stored {stored})"


@dataclass
class Draft:
    """Config + tensors under canonical names.

    Canonical names: `fc.weight` [H, N*Ht]; `layers.{i}.self_attn.{q,k,v,o}_proj.weight`;
    `layers.{i}.mlp.{gate,up,down}_proj.weight`; `layers.{i}.{input_layernorm,hidden_norm,
    post_attention_layernorm}.weight`; `norm.weight`; `lm_head.weight` [D, H];
    `embed_tokens.weight` [V, H]; optional `input_norm.weight`, `fc_norm.{i}.weight`,
    `layers.{i}.self_attn.{q,k}_norm.weight`; MLA's `layers.{i}.self_attn.{q_a_proj,q_a_layernorm,
    q_b_proj,kv_a_proj_with_mqa,kv_a_layernorm,kv_b_proj}.weight` and, in SpecForge PR 186's
    layout, `layers.0.input_proj.{input_norm,proj}.weight`; P-EAGLE's `mask_hidden` [N*Ht].
    A block draft (`config.block`) has no layer-0 `hidden_norm`: its `hidden_norm.weight` [H] norms
    fc's output once, for every layer; `embed_tokens.weight` and `lm_head.weight` [V, H] are the
    target's; optional `mask_embedding` [H] (vLLM's `mask_embedding.pt`); DFlash2's
    `layers.{i}.{attention_conv,mlp_conv}.{base_kernel,kernel_projection.weight}` and
    `candidate_selector.{predecessor_codebook,successor_codebook,hidden_projection}.weight`.
    """

    config: DraftConfig
    weights: dict[str, torch.Tensor]
    vocab: VocabMap
    name: str = "draft"
    path: str = ""
    layout: str = "unknown"  # what the loader detected, e.g. "speculators", "specforge"
    notes: list[str] = field(default_factory=list)  # non-fatal remarks from loading
    # The vocab map as stored in the weight file; None when the draft was not loaded from files.
    stored_vocab: StoredVocab | None = None
    # The floating dtype of the weight file; None when the draft was not loaded from files.
    stored_dtype: torch.dtype | None = None
    dtype_note: str | None = None  # why it is computed in another dtype than stored, or not
    quantization: Quantization | None = None  # stored quantized, dequantized at load

    @property
    def device(self) -> torch.device:
        return self.weights["fc.weight"].device

    @property
    def dtype(self) -> torch.dtype:
        return self.weights["fc.weight"].dtype

    @property
    def stored_dtype_name(self) -> str | None:
        """The weight file's dtype where the draft is computed in another one, else None."""
        if self.stored_dtype is None or self.stored_dtype == self.dtype:
            return None
        return str(self.stored_dtype).removeprefix("torch.")

    @property
    def dtype_label(self) -> str:
        return dtype_label(str(self.dtype).removeprefix("torch."), self.stored_dtype_name)

    def to(
        self, device: torch.device | str | None = None, dtype: torch.dtype | None = None
    ) -> Draft:
        """A copy on another device / dtype. Integer and bool tensors keep their dtype."""

        def move(t: torch.Tensor) -> torch.Tensor:
            if dtype is not None and t.is_floating_point():
                t = t.to(dtype)
            return t.to(device) if device is not None else t

        return replace(
            self,
            weights={k: move(v) for k, v in self.weights.items()},
            vocab=self.vocab.to(device) if device is not None else self.vocab,
        )

    def fc_block(self, block: int) -> torch.Tensor:
        """Columns of fc.weight that multiply slot `block` of the fc input, [H, Ht]."""
        ht = self.config.target_hidden_size
        return self.weights["fc.weight"][:, block * ht : (block + 1) * ht]

    def fc_block_norms(self) -> list[float]:
        """Frobenius norm of each fc column block (a fingerprint of which slot it was trained on)."""
        return [float(self.fc_block(b).float().norm()) for b in range(self.config.num_fc_blocks)]
