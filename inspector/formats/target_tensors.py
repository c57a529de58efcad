"""The few target-model tensors the inspector needs, read without loading the rest.

Each is checked against the draft it serves before its data is read (from the safetensors header
when there is one): the embedding must be [vocab_size, hidden_size] of the draft, the lm_head
[vocab_size, target_hidden_size], the final norm [target_hidden_size].

The target's head (final norm + lm_head) rebuilds its logits from the last hidden state, the way
transformers' model class for the target's `model_type` computes them (5.x; see CONVENTIONS):
which RMSNorm (Llama's `w * x/rms(x)`, Gemma's `x/rms(x) * (1 + w)` in float32), which logit
transform after the head (Gemma's soft-capping, Granite's `logits_scaling`), where a
vision-language model nests its language model's weights and config (`text_config`), and when the
head is the embedding (tied). A `model_type` whose convention is not in the table is refused with
one line rather than read as Llama's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import torch

from inspector.errors import InputError
from inspector.formats.config import DEFAULT_RMS_NORM_EPS, ConfigReader
from inspector.formats.tensorfiles import (
    find_weight_file,
    read_json,
    read_tensors,
    tensor_headers,
    tensor_names,
)

# Causal LMs first, then the layouts of vision-language models: transformers 5 saves their
# language model under `model.language_model.`, earlier saves (and many hub checkpoints) under
# `language_model.model.`, with the head at `language_model.lm_head.`.
EMBED_NAMES = (
    "model.embed_tokens.weight",
    "model.language_model.embed_tokens.weight",
    "language_model.model.embed_tokens.weight",
    "embed_tokens.weight",
    "model.embed.weight",
)
NORM_NAMES = (
    "model.norm.weight",
    "model.language_model.norm.weight",
    "language_model.model.norm.weight",
    "norm.weight",
)
HEAD_NAMES = ("lm_head.weight", "language_model.lm_head.weight")

# How the final norm computes, as transformers' RMSNorm classes do (x: the state, in its dtype d):
RMS = "rms"  # Llama: w * (x/rms(x) in float32).to(d)
RMS_FLOAT = "rms_float"  # gpt-oss: (w * x/rms(x)).to(d), the product in float32
RMS_ONE_PLUS = "rms_one_plus"  # Gemma, Qwen3-Next: (x/rms(x) * (1 + w)).to(d), all in float32
NORM_STYLES = (RMS, RMS_FLOAT, RMS_ONE_PLUS)


@dataclass(frozen=True)
class Convention:
    """What transformers' class for one `model_type` does at its final norm and head.

    `eps`: the config class's default `rms_norm_eps` (what a config.json without it means).
    `softcap`: the head applies `final_logit_softcapping` from the config (cap * tanh(z / cap)),
    whose default is `softcap_default`. `scaling`: the head divides by `logits_scaling`.
    `tied`: the config class's default `tie_word_embeddings` (read from the model's own config).
    """

    norm: str
    eps: float
    softcap: bool = False
    softcap_default: float | None = None
    scaling: bool = False
    tied: bool = False


# Read from transformers 5.24 (models/<type>/modeling_<type>.py: the final norm's class and the
# causal LM's forward after `self.lm_head`) and the config classes' defaults. Every type here
# keeps its final norm's eps in `rms_norm_eps` and has an lm_head without bias.
CONVENTIONS: dict[str, Convention] = {
    # Llama-style RMSNorm, plain head
    "llama": Convention(RMS, 1e-6),
    "llama4_text": Convention(RMS, 1e-5),
    "mistral": Convention(RMS, 1e-6),
    "mixtral": Convention(RMS, 1e-5),
    "ministral": Convention(RMS, 1e-6),
    "ministral3": Convention(RMS, 1e-5),
    "qwen2": Convention(RMS, 1e-6),
    "qwen2_moe": Convention(RMS, 1e-6),
    "qwen3": Convention(RMS, 1e-6),
    "qwen3_moe": Convention(RMS, 1e-6),
    "deepseek_v2": Convention(RMS, 1e-6),
    "deepseek_v3": Convention(RMS, 1e-6),
    "glm4": Convention(RMS, 1.5625e-07),
    "glm4_moe": Convention(RMS, 1e-5),
    "phi3": Convention(RMS, 1e-5),
    "qwen2_vl_text": Convention(RMS, 1e-5),
    "qwen2_5_vl_text": Convention(RMS, 1e-5),
    "qwen3_vl_text": Convention(RMS, 1e-6),
    "qwen3_vl_moe_text": Convention(RMS, 1e-6),
    # the norm's product in float32
    "gpt_oss": Convention(RMS_FLOAT, 1e-5),
    # (1 + w) norms; Gemma 2 and Gemma 3's causal LM soft-cap their logits when the config says
    "gemma": Convention(RMS_ONE_PLUS, 1e-6, tied=True),
    "gemma2": Convention(RMS_ONE_PLUS, 1e-6, softcap=True, softcap_default=30.0, tied=True),
    "gemma3_text": Convention(RMS_ONE_PLUS, 1e-6, softcap=True, tied=True),
    "qwen3_next": Convention(RMS_ONE_PLUS, 1e-6),
    # logits / logits_scaling
    "granite": Convention(RMS, 1e-6, scaling=True),
    # Vision-language models: their text config's type gives the norm (this entry when it names
    # none), their own class the head. Gemma3ForConditionalGeneration applies no soft-capping,
    # even when its text config sets final_logit_softcapping (released checkpoints set none).
    "gemma3": Convention(RMS_ONE_PLUS, 1e-6, tied=True),
    "mistral3": Convention(RMS, 1e-5, tied=True),
    "llama4": Convention(RMS, 1e-5),
    "qwen2_vl": Convention(RMS, 1e-5),
    "qwen2_5_vl": Convention(RMS, 1e-5),
    "qwen3_vl": Convention(RMS, 1e-6),
    "qwen3_vl_moe": Convention(RMS, 1e-6),
}
# A config whose model_type is not in the table (a remote-code model, e.g. Kimi K2's "kimi_k2")
# is read by the transformers class its `architectures` names, when that class is in the table.
ARCHITECTURES: dict[str, str] = {
    "LlamaForCausalLM": "llama",
    "Llama4ForCausalLM": "llama4_text",
    "MistralForCausalLM": "mistral",
    "MixtralForCausalLM": "mixtral",
    "MinistralForCausalLM": "ministral",
    "Ministral3ForCausalLM": "ministral3",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen2MoeForCausalLM": "qwen2_moe",
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "DeepseekV2ForCausalLM": "deepseek_v2",
    "DeepseekV3ForCausalLM": "deepseek_v3",
    "Glm4ForCausalLM": "glm4",
    "Glm4MoeForCausalLM": "glm4_moe",
    "Phi3ForCausalLM": "phi3",
    "GptOssForCausalLM": "gpt_oss",
    "GemmaForCausalLM": "gemma",
    "Gemma2ForCausalLM": "gemma2",
    "Gemma3ForCausalLM": "gemma3_text",
    "Qwen3NextForCausalLM": "qwen3_next",
    "GraniteForCausalLM": "granite",
    "Gemma3ForConditionalGeneration": "gemma3",
    "Mistral3ForConditionalGeneration": "mistral3",
    "Llama4ForConditionalGeneration": "llama4",
    "Qwen2VLForConditionalGeneration": "qwen2_vl",
    "Qwen2_5_VLForConditionalGeneration": "qwen2_5_vl",
    "Qwen3VLForConditionalGeneration": "qwen3_vl",
    "Qwen3VLMoeForConditionalGeneration": "qwen3_vl_moe",
}


def _pick(names: set[str], options: tuple[str, ...]) -> str | None:
    for o in options:
        if o in names:
            return o
    # Other nestings of the embedding, e.g. "model.text_model.embed_tokens.weight".
    for n in sorted(names):
        if any(n.endswith(o.split("model.", 1)[-1]) and "embed" in o for o in options):
            return n
    return None


def _read_checked(
    weight_file: Path, wanted: dict[str, tuple[int, ...] | None], why: str
) -> dict[str, torch.Tensor]:
    """Read tensors whose expected shapes are given (None: any), checking the declared shape in
    the safetensors header first, so a wrong-sized tensor is refused without reading it."""
    headers = tensor_headers(weight_file, list(wanted)) or {}
    for name, shape in wanted.items():
        if shape is not None and name in headers and headers[name].shape != shape:
            raise InputError(
                weight_file, name, f"shape {headers[name].shape}, expected {shape} ({why})"
            )
    tensors = read_tensors(weight_file, list(wanted))
    for name, shape in wanted.items():
        t = tensors[name]
        if shape is not None and tuple(t.shape) != shape:
            raise InputError(weight_file, name, f"shape {tuple(t.shape)}, expected {shape} ({why})")
        if not t.is_floating_point():
            raise InputError(weight_file, name, f"dtype {t.dtype}, expected a floating type")
        if not bool(torch.isfinite(t).all()):
            raise InputError(weight_file, name, "contains NaN or Inf")
    return tensors


def read_embedding(path: Path, shape: tuple[int, int] | None = None) -> torch.Tensor:
    """`model.embed_tokens.weight` from a target folder or from a safetensors / .bin file;
    `shape` [vocab_size, hidden_size] of the draft it is for, when known."""
    path = Path(path)
    weight_file = find_weight_file(path) if path.is_dir() else path
    if not weight_file.exists():
        raise InputError(path, None, "file not found")
    name = _pick(set(tensor_names(weight_file)), EMBED_NAMES)
    if name is None:
        raise InputError(weight_file, "model.embed_tokens.weight", "tensor not found")
    why = "the draft's [vocab_size, hidden_size]"
    return _read_checked(weight_file, {name: shape}, why)[name]


@dataclass
class TargetHead:
    """Final norm + lm_head of the target, to rebuild verifier logits from its last hidden state:
    `logits(normed(h))` is what the target's own model class computes (see CONVENTIONS)."""

    norm_weight: torch.Tensor | None  # None when the target ties no norm we could find
    lm_head: torch.Tensor  # [V, Ht]
    rms_norm_eps: float
    path: str
    norm_style: str = RMS  # one of NORM_STYLES
    softcap: float | None = None  # logits = softcap * tanh(logits / softcap)
    logits_scaling: float | None = None  # logits = logits / logits_scaling
    model_type: str | None = None  # whose convention this is (None: a config naming none)

    def to(self, device: torch.device | str, dtype: torch.dtype | None = None) -> TargetHead:
        return replace(
            self,
            norm_weight=None if self.norm_weight is None else self.norm_weight.to(device, dtype),
            lm_head=self.lm_head.to(device, dtype),
        )

    def normed(self, x: torch.Tensor) -> torch.Tensor:
        """The final norm of the last layer's output `x` [..., Ht], in `x`'s dtype; `x` itself
        when there is no norm."""
        w = self.norm_weight
        if w is None:
            return x
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.rms_norm_eps)
        if self.norm_style == RMS_ONE_PLUS:
            return (xf * (1.0 + w.float())).to(x.dtype)
        if self.norm_style == RMS_FLOAT:
            return (w * xf).to(x.dtype)
        return w * xf.to(x.dtype)

    def finish(self, logits: torch.Tensor) -> torch.Tensor:
        """What the target's head does to `lm_head @ normed` before returning it."""
        if self.logits_scaling is not None:
            logits = logits / self.logits_scaling
        if self.softcap is not None:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return logits

    def logits(self, normed: torch.Tensor) -> torch.Tensor:
        """The target's logits [..., V] from its final normed state."""
        return self.finish(normed.to(self.lm_head.dtype) @ self.lm_head.T)


def _config(folder: Path) -> tuple[ConfigReader, ConfigReader]:
    """The target's config.json (empty when absent) and its language model's part: `text_config`
    of a vision-language model, else the config itself."""
    cfg_path = folder / "config.json"
    top = ConfigReader(cfg_path, read_json(cfg_path) if cfg_path.exists() else {})
    return top, top.sub("text_config") or top


def _type_of(cfg: ConfigReader) -> str | None:
    """The config's model_type as the table knows it: its own, or failing that the class its
    `architectures` names; its own (unknown) when neither is known, None when it names none."""
    kind = cfg.get("model_type")
    if kind is not None and not isinstance(kind, str):
        raise cfg.error("model_type", f"expected a string, got {kind!r}")
    if kind in CONVENTIONS:
        return kind
    archs = cfg.get("architectures", [])
    for a in archs if isinstance(archs, list) else ():
        if isinstance(a, str) and a in ARCHITECTURES:
            return ARCHITECTURES[a]
    return kind


def _unknown(cfg: ConfigReader, kind: str) -> InputError:
    return cfg.error(
        "model_type",
        f"{kind!r}: no known final norm and head convention for it (known: "
        f"{', '.join(sorted(CONVENTIONS))}), so the target's logits cannot be rebuilt",
    )


@dataclass(frozen=True)
class HeadReading:
    """How a target config says its logits are computed (see `head_convention`)."""

    model_type: str | None  # the table's type; None: a config naming none, read as Llama's
    norm_style: str
    eps: float
    softcap: float | None
    logits_scaling: float | None
    tied_default: bool | None  # tie_word_embeddings when the config does not say (None: unknown)


def head_convention(top: ConfigReader, text: ConfigReader) -> HeadReading:
    """The final norm and head of a target config: the norm by its language model's type, the
    head by the model's own. A config naming no model_type anywhere (a bare test fixture) is read
    as Llama's; an unknown one is refused."""
    kind = _type_of(top)
    if kind is None and text is not top:
        kind, top = _type_of(text), text  # a nested config naming only its language model's type
    if kind is None:
        eps = text.positive_number("rms_norm_eps", DEFAULT_RMS_NORM_EPS)
        return HeadReading(None, RMS, eps, None, None, None)
    if kind not in CONVENTIONS:
        raise _unknown(top, kind)
    head = CONVENTIONS[kind]
    norm = head
    if text is not top:
        text_kind = _type_of(text)
        if text_kind is not None:
            if text_kind not in CONVENTIONS:
                raise _unknown(text, text_kind)
            norm = CONVENTIONS[text_kind]
    # A flat vision-language config (Qwen2.5-VL's on the hub) keeps the text keys at the top.
    eps_at = text if text.has("rms_norm_eps") or not top.has("rms_norm_eps") else top
    eps = eps_at.positive_number("rms_norm_eps", norm.eps)
    softcap = None
    if head.softcap:  # a causal LM: its text config is the config; null turns the cap off
        key = "final_logit_softcapping"
        softcap = head.softcap_default
        if key in top.obj:
            softcap = top.positive_number(key, None) if top.has(key) else None
    scaling = top.positive_number("logits_scaling", 1.0) if head.scaling else None
    return HeadReading(kind, norm.norm, eps, softcap, scaling, head.tied)


def _tied(top: ConfigReader, text: ConfigReader, default: bool | None) -> bool:
    """Whether a target that stores no lm_head uses its embedding as the head. transformers 5
    reads tie_word_embeddings from the model's own (top-level) config, else its class's `default`;
    a text_config's true still ties (pre-5 saves of vision-language models kept it there, and
    Qwen2.5-VL's config forwards it). `default` None (a type not in the table): the text
    config's value, else untied."""
    key = "tie_word_embeddings"
    if top.has(key):
        return top.flag(key)
    in_text = text is not top and text.has(key) and text.flag(key)
    if default is None:
        return bool(in_text)
    return default or bool(in_text)


def _head_name(
    weight_file: Path,
    names: set[str],
    top: ConfigReader,
    text: ConfigReader,
    tied_default: bool | None,
) -> str:
    head = _pick(names, HEAD_NAMES)
    if head is not None:
        return head
    embed = _pick(names, EMBED_NAMES)
    if embed is not None and _tied(top, text, tied_default):
        return embed
    why = "tensor not found"
    if embed is not None:
        explicit = top.has("tie_word_embeddings") or text.has("tie_word_embeddings")
        why += f" (tie_word_embeddings {'is' if explicit else 'defaults to'} false)"
    raise InputError(weight_file, "lm_head.weight", why)


def read_target_lm_head(folder: Path) -> torch.Tensor:
    """The target's lm_head [V, Ht] alone (its embedding when tied), unchecked, whatever its norm
    convention: what a draft that ships no head borrows."""
    folder = Path(folder)
    weight_file = find_weight_file(folder)
    top, text = _config(folder)
    kind = _type_of(top) or (_type_of(text) if text is not top else None)
    tied = CONVENTIONS[kind].tied if kind in CONVENTIONS else None
    head = _head_name(weight_file, set(tensor_names(weight_file)), top, text, tied)
    return _read_checked(weight_file, {head: None}, "")[head]


def read_target_head(
    folder: Path, *, vocab_size: int | None = None, hidden_size: int | None = None
) -> TargetHead:
    """The target's final norm and lm_head from its folder, checked against the draft's target
    vocab (`vocab_size`) and `target_hidden_size` when they are given."""
    folder = Path(folder)
    weight_file = find_weight_file(folder)
    names = set(tensor_names(weight_file))
    top, text = _config(folder)
    how = head_convention(top, text)
    head = _head_name(weight_file, names, top, text, how.tied_default)
    norms = [n for n in NORM_NAMES if n in names]
    if len(norms) > 1:
        raise InputError(weight_file, norms[0], f"several final norms stored ({', '.join(norms)})")
    norm = norms[0] if norms else None
    if norm is None and how.model_type is not None:
        # A model of a known type always stores its final norm: without it the logits are wrong.
        raise InputError(weight_file, NORM_NAMES[0], "tensor not found (the target's final norm)")
    if norm is not None and norm.removesuffix("weight") + "bias" in names:
        bias = norm.removesuffix("weight") + "bias"
        raise InputError(weight_file, bias, "the final norm has a bias: not an RMSNorm")
    head_shape = (vocab_size, hidden_size) if vocab_size and hidden_size else None
    wanted: dict[str, tuple[int, ...] | None] = {head: head_shape}
    if norm:
        wanted[norm] = (hidden_size,) if hidden_size else None
    tensors = _read_checked(weight_file, wanted, "the draft's vocab_size and target_hidden_size")
    return TargetHead(
        tensors.get(norm) if norm else None,
        tensors[head],
        how.eps,
        str(folder),
        norm_style=how.norm_style,
        softcap=how.softcap,
        logits_scaling=how.logits_scaling,
        model_type=how.model_type,
    )
