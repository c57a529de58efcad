"""The target model under transformers: loading (never remote code), the slots of one sequence,
and greedy or sampled continuations.

Hidden states come from ``output_hidden_states``: entry 0 is the embedding output (the input of
the first decoder layer, so Gemma's sqrt(hidden) scaling included) and entry k (1..L-1) the output
of decoder layer k-1. Entry L is *not* used: transformers (5.x, every architecture) returns the
state after the final norm there, while engines (and speculators files) capture the last layer's
output before it. A hook on the final norm module gives both: its input is HF index L as engines
mean it, its output is the post-norm state.

The final norm is found by what it does, not by its name: among the norm-like children of the text
decoder (``get_decoder()``: the base model of a causal LM, the language model of a vision-language
one), it is the one whose output the decoder returns as its last hidden state (what the head
reads), and whose input is the last decoder layer's output. A three-token probe forward at load
time checks both, so a model with no such module is refused before anything is written.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from inspector.errors import InputError, setting_field

DTYPE_NAMES = ("auto", "float32", "bfloat16", "float16")


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


@dataclass(frozen=True)
class Generation:
    """A continuation: the request's new tokens, the target's tokens past its stop, and how it
    stopped ("length" or "stop", an EOS)."""

    new: list[int]
    tail: list[int]
    finish: str


@dataclass(frozen=True)
class TargetInfo:
    """What the capture needs to know before loading weights."""

    num_layers: int
    vocab_size: int
    max_positions: int | None
    eos_ids: tuple[int, ...]


def read_target_info(target: str | Path) -> TargetInfo:
    """Layer count, vocabulary and EOS ids from the target's config.json via transformers."""
    target = Path(target)
    if not (target / "config.json").is_file():
        raise InputError(target, "config.json", "not found: TARGET is a Hugging Face model folder")
    try:
        from transformers import AutoConfig
    except ImportError as e:
        raise InputError(
            None, "transformers", "not installed: pip install 'eagle3-inspector[capture]'"
        ) from e
    try:
        cfg = AutoConfig.from_pretrained(str(target), trust_remote_code=False)
    except Exception as e:  # noqa: BLE001 - unknown model types, remote code, bad JSON
        raise InputError(target / "config.json", None, _first_line(e)) from e
    text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    L = getattr(text, "num_hidden_layers", None)
    V = getattr(text, "vocab_size", None)
    if not isinstance(L, int) or L < 1:
        raise InputError(target / "config.json", "num_hidden_layers", f"unusable: {L!r}")
    if not isinstance(V, int) or V < 1:
        raise InputError(target / "config.json", "vocab_size", f"unusable: {V!r}")
    eos = getattr(text, "eos_token_id", None)
    eos_ids = tuple(eos) if isinstance(eos, list | tuple) else (() if eos is None else (int(eos),))
    max_pos = getattr(text, "max_position_embeddings", None)
    return TargetInfo(L, V, max_pos if isinstance(max_pos, int) else None, eos_ids)


def model_class(target: str | Path) -> Any:
    """The transformers auto class that loads ``target``: ``AutoModelForCausalLM``, or for a
    vision-language model it does not map (Mistral 3) ``AutoModelForImageTextToText``, whose
    language model the capture then runs on its own. Anything else is refused with one line."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES,
    )

    where = Path(target) / "config.json"
    try:
        cfg = AutoConfig.from_pretrained(str(target), trust_remote_code=False)
    except Exception as e:  # noqa: BLE001 - read_target_info has read it already; same message
        raise InputError(where, None, _first_line(e)) from e
    kind = getattr(cfg, "model_type", None)
    if kind in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return AutoModelForCausalLM
    if kind in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES:
        return AutoModelForImageTextToText
    raise InputError(
        where, "model_type", f"{kind!r}: transformers has no causal language model for it"
    )


def _norm_like(m: torch.nn.Module) -> bool:
    """A leaf module that normalises: torch's own kinds, or a model's own class (LlamaRMSNorm,
    Gemma3RMSNorm, ...), which transformers names ``*Norm``."""
    if any(True for _ in m.children()):
        return False
    kinds = (torch.nn.LayerNorm, torch.nn.RMSNorm, torch.nn.GroupNorm)
    return isinstance(m, kinds) or "norm" in type(m).__name__.lower()


def _first(x: Any) -> Any:
    return x[0] if isinstance(x, tuple | list) else x


def _same(a: Any, b: Any) -> bool:
    """The same state: the same tensor (what transformers passes on), or equal values."""
    if a is b:
        return True
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor) or a.shape != b.shape:
        return False
    return bool(torch.equal(a, b.to(a.device)))


def _probe_ids(decoder: torch.nn.Module) -> list[int]:
    """Three token ids for the probe forward, not the padding id: its embedding row is often zero,
    and a zero state is everywhere the same, so the probe would tell no module from another."""
    cfg = getattr(decoder, "config", None)
    pad = getattr(cfg, "pad_token_id", None)
    vocab = getattr(cfg, "vocab_size", None) or 3
    return [i for i in range(min(vocab, 4)) if i != pad][:3]


def locate_final_norm(
    decoder: torch.nn.Module, num_layers: int, device: torch.device | str, target: str | Path
) -> tuple[str, torch.nn.Module]:
    """The name and module of ``decoder``'s final norm, found by what it does rather than what it
    is called (no architecture's names are assumed): a norm-like direct child of the decoder that
    runs once per forward, whose input is the output of the last of the ``num_layers`` decoder
    layers and whose output the decoder returns as its last hidden state. A three-token forward
    checks that; a model with no such module is refused with one line (the engines' last slot is
    the state before that norm, so without it there is nothing to capture as HF index L)."""
    where = Path(target) / "config.json"
    model_type = getattr(getattr(decoder, "config", None), "model_type", None)
    kind = f"{model_type!r} ({type(decoder).__name__})" if model_type else type(decoder).__name__

    def refuse(what: str) -> InputError:
        return InputError(
            where,
            "model_type",
            f"{kind}: {what}: cannot capture the last layer's output before the final norm",
        )

    stacks = [
        m for m in decoder.children() if isinstance(m, torch.nn.ModuleList) and len(m) == num_layers
    ]
    if len(stacks) != 1:
        raise refuse(f"no single list of its {num_layers} decoder layers")
    last_layer = stacks[0][-1]
    candidates = [(n, m) for n, m in decoder.named_children() if _norm_like(m)]
    if not candidates:
        raise refuse("no final norm module")
    calls: dict[str, list[tuple[Any, Any]]] = {n: [] for n, _ in candidates}
    seen: dict[str, Any] = {}
    hooks = [
        m.register_forward_hook(
            lambda mod, args, out, n=n: calls[n].append((args[0] if args else None, _first(out)))
        )
        for n, m in candidates
    ]
    hooks.append(
        last_layer.register_forward_hook(lambda mod, args, out: seen.update(last=_first(out)))
    )
    try:
        with torch.no_grad():
            probe = torch.tensor([_probe_ids(decoder)], dtype=torch.long, device=device)
            out = decoder(input_ids=probe, use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    final = getattr(out, "last_hidden_state", None)
    if final is None:
        final = _first(out)
    found = [(n, m) for n, m in candidates if len(calls[n]) == 1 and _same(calls[n][0][1], final)]
    if len(found) > 1:
        raise refuse(
            f"several norm modules give the state its head reads ({', '.join(n for n, _ in found)})"
        )
    if not found:
        raise refuse("no norm module's output is the state its head reads")
    name, norm = found[0]
    if "last" not in seen or not _same(calls[name][0][0], seen["last"]):
        raise refuse(f"the input of its final norm ({name}) is not its last decoder layer's output")
    return name, norm


class TargetModel:
    """A loaded transformers language model (see :func:`model_class`) with a hook on the final norm
    of its text decoder (see :func:`locate_final_norm`)."""

    def __init__(
        self,
        target: str | Path,
        *,
        dtype: str = "auto",
        device: str = "auto",
        device_map: str | None = None,
    ) -> None:
        from transformers.utils import logging as hf_logging

        from inspector.evaluate import resolve_device

        # Our own bar shows progress; a second one from the weight loader would interleave.
        hf_logging.disable_progress_bar()

        if dtype not in DTYPE_NAMES:
            raise InputError(
                None, setting_field("dtype"), f"{dtype!r}: one of {', '.join(DTYPE_NAMES)}"
            )
        self.path = Path(target)
        self.info = read_target_info(target)
        auto = model_class(target)
        kwargs: dict[str, Any] = {
            "dtype": dtype if dtype == "auto" else getattr(torch, dtype),
            "trust_remote_code": False,
            "output_loading_info": True,
        }
        if device_map is not None:
            kwargs["device_map"] = device_map
        # transformers reports missing weights as a long table; we raise one line instead.
        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()
        try:
            model, loading = auto.from_pretrained(str(target), **kwargs)
        except ImportError as e:  # device_map="auto" needs accelerate
            raise InputError(None, setting_field("device-map"), _first_line(e)) from e
        except (OSError, ValueError, KeyError) as e:
            raise InputError(target, None, f"cannot load the model: {_first_line(e)}") from e
        finally:
            hf_logging.set_verbosity(verbosity)
        missing = list(loading.get("missing_keys") or [])
        if missing:
            # transformers fills missing weights with random values: capturing them is worthless.
            raise InputError(
                target,
                missing[0],
                f"missing from the checkpoint ({len(missing)} tensors missing): not a complete model",
            )
        if device_map is None:
            model = model.to(resolve_device(device))
        self.model = model.eval()
        # The text decoder: the base model of a causal LM, the language model of a VLM (whose
        # vision tower a text-only capture never runs).
        self.decoder = model.get_decoder()
        # With a device map the inputs go where the embedding lives.
        embed = model.get_input_embeddings().weight
        self.input_device = embed.device
        self.dtype = embed.dtype
        self.norm_name, self.norm = locate_final_norm(
            self.decoder, self.info.num_layers, self.input_device, target
        )
        self._seen: dict[str, torch.Tensor] = {}
        self._norm_calls = 0
        self.norm.register_forward_hook(self._on_norm)

    def _on_norm(self, module: torch.nn.Module, args: tuple, output: Any) -> None:
        self._norm_calls += 1
        self._seen["pre"] = args[0]
        self._seen["post"] = output[0] if isinstance(output, tuple) else output

    def _reset(self) -> None:
        self._seen.clear()
        self._norm_calls = 0

    @torch.no_grad()
    def slots(self, ids: list[int], slots: tuple, save_dtype: torch.dtype) -> list[torch.Tensor]:
        """The requested slots of one sequence, each [T, H] on the CPU in ``save_dtype``.

        ``slots``: HF indices (L = the last layer before the final norm) or "post-norm".
        """
        x = torch.tensor([ids], dtype=torch.long, device=self.input_device)
        self._reset()
        out = self.decoder(input_ids=x, output_hidden_states=True, use_cache=False)
        res = [t.to("cpu", save_dtype) for t in self._pick(out.hidden_states, slots)]
        self._reset()
        return res

    def _pick(self, hs: tuple[torch.Tensor, ...], slots: tuple) -> list[torch.Tensor]:
        """The requested slots of the forward that just ran, [Q, H] each (batch row 0)."""
        L = self.info.num_layers
        # Once per forward: a norm run twice would leave its last call here, not the final state.
        if self._norm_calls != 1 or len(hs) != L + 1:
            raise RuntimeError(
                f"the model did not return {L + 1} hidden states through its final norm "
                f"({self.norm_name} ran {self._norm_calls} times)"
            )
        res = []
        for s in slots:
            if s == "post-norm":
                t = self._seen["post"]
            elif s == L:
                t = self._seen["pre"]
            else:
                t = hs[s]
            res.append(t[0])
        return res

    @torch.no_grad()
    def forward_cached(
        self,
        ids: torch.Tensor,
        slots: tuple,
        *,
        cache: Any = None,
        positions: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, list[torch.Tensor], Any]:
        """One forward of ``ids`` [Q] after the tokens held in ``cache`` (None: a prefill): the
        logits [Q, V], the requested slots [Q, H] (on the model's device and dtype) and the cache,
        which now holds these Q tokens too.

        ``positions`` [Q] and ``mask`` [Q, cached + Q] (True = may attend) replace the causal
        defaults, for a tree of tokens verified in one forward. transformers takes a 4D mask as
        given (no causal mask is built over it); it is passed additive (0 / the dtype's minimum),
        which the eager and the SDPA attention both read the same way.
        """
        params = inspect.signature(self.model.forward).parameters
        kv = "cache" if "cache" in params else "past_key_values"
        x = ids.to(self.input_device, torch.long)[None]
        kwargs: dict[str, Any] = {"use_cache": True, "output_hidden_states": True}
        if cache is not None:
            kwargs[kv] = cache
        if positions is not None:
            kwargs["position_ids"] = positions.to(self.input_device, torch.long)[None]
        if mask is not None:
            add = torch.zeros(mask.shape, dtype=self.dtype, device=self.input_device)
            add.masked_fill_(~mask.to(self.input_device), torch.finfo(self.dtype).min)
            kwargs["attention_mask"] = add[None, None]
        self._reset()
        out = self.model(input_ids=x, **kwargs)
        res = self._pick(out.hidden_states, slots)
        self._reset()
        return out.logits[0], res, getattr(out, kv)

    @torch.no_grad()
    def logits_forward(self, ids: list[int]) -> torch.Tensor:
        """The plain forward (logits of the last position), for throughput comparisons."""
        x = torch.tensor([ids], dtype=torch.long, device=self.input_device)
        return self.model(input_ids=x, use_cache=False).logits[0, -1]

    @torch.no_grad()
    def continue_prompt(
        self, prompt: list[int], n: int, *, temperature: float, seed: int
    ) -> list[int]:
        """Up to ``n`` new tokens after ``prompt``: greedy when ``temperature`` is 0, else sampled
        from softmax(logits / temperature) with a CPU generator seeded by ``seed`` (the same on
        every device). Stops after an EOS token, which is kept."""
        return self.generate(prompt, n, temperature=temperature, seed=seed).new

    def generate(
        self, prompt: list[int], n: int, *, temperature: float, seed: int, past_stop: int = 0
    ) -> Generation:
        """``continue_prompt``'s tokens, and ``past_stop`` more of the target's continuation after
        the stop (after the EOS too, drawn the same way): what an engine's last round is counted
        against, outside the request."""
        gen = torch.Generator().manual_seed(seed)
        # transformers renamed `past_key_values` to `cache` (argument and output) during 5.x.
        params = inspect.signature(self.model.forward).parameters
        kv = "cache" if "cache" in params else "past_key_values"
        x = torch.tensor([prompt], dtype=torch.long, device=self.input_device)
        out = self.model(input_ids=x, use_cache=True)
        new: list[int] = []
        tail: list[int] = []
        finish = "length"
        while True:
            logits = out.logits[0, -1].float().cpu()
            if temperature > 0:
                probs = torch.softmax(logits / temperature, -1)
                nxt = int(torch.multinomial(probs, 1, generator=gen))
            else:
                nxt = int(logits.argmax())
            if len(new) < n and (not new or new[-1] not in self.info.eos_ids):
                new.append(nxt)
                if nxt in self.info.eos_ids:
                    finish = "stop"
            else:
                tail.append(nxt)
            stopped = len(new) == n or new[-1] in self.info.eos_ids
            if stopped and len(tail) >= past_stop:
                break
            step = torch.tensor([[nxt]], dtype=torch.long, device=self.input_device)
            out = self.model(input_ids=step, use_cache=True, **{kv: getattr(out, kv)})
        self._reset()
        return Generation(new, tail, finish)
