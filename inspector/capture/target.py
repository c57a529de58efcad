"""The target model under transformers: loading (never remote code), the slots of one sequence,
and greedy or sampled continuations.

Hidden states come from ``output_hidden_states``: entry 0 is the embedding output and entry k
(1..L-1) the output of decoder layer k-1. Entry L is *not* used: transformers returns the state
after the final norm there, while engines (and speculators files) capture the last layer's output
before it. A hook on the final norm module gives both: its input is HF index L as engines mean it,
its output is the post-norm state.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from inspector.errors import InputError

NORM_NAMES = ("norm", "final_layernorm", "final_norm", "ln_f", "norm_f")
DTYPE_NAMES = ("auto", "float32", "bfloat16", "float16")


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


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


class TargetModel:
    """A loaded ``AutoModelForCausalLM`` with a hook on its final norm."""

    def __init__(
        self,
        target: str | Path,
        *,
        dtype: str = "auto",
        device: str = "auto",
        device_map: str | None = None,
    ) -> None:
        from transformers import AutoModelForCausalLM
        from transformers.utils import logging as hf_logging

        from inspector.evaluate import resolve_device

        # Our own bar shows progress; a second one from the weight loader would interleave.
        hf_logging.disable_progress_bar()

        if dtype not in DTYPE_NAMES:
            raise InputError(None, "--dtype", f"{dtype!r}: one of {', '.join(DTYPE_NAMES)}")
        self.path = Path(target)
        self.info = read_target_info(target)
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
            model, loading = AutoModelForCausalLM.from_pretrained(str(target), **kwargs)
        except ImportError as e:  # device_map="auto" needs accelerate
            raise InputError(None, "--device-map", _first_line(e)) from e
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
        self.base = model.base_model
        self.norm = next(
            (
                getattr(self.base, n)
                for n in NORM_NAMES
                if isinstance(getattr(self.base, n, None), torch.nn.Module)
            ),
            None,
        )
        if self.norm is None:
            raise InputError(target, "final norm", "no final norm module found in the model")
        # With a device map the inputs go where the embedding lives.
        self.input_device = model.get_input_embeddings().weight.device
        self.dtype = next(model.parameters()).dtype
        self._seen: dict[str, torch.Tensor] = {}
        self.norm.register_forward_hook(self._on_norm)

    def _on_norm(self, module: torch.nn.Module, args: tuple, output: Any) -> None:
        self._seen["pre"] = args[0]
        self._seen["post"] = output[0] if isinstance(output, tuple) else output

    @torch.no_grad()
    def slots(self, ids: list[int], slots: tuple, save_dtype: torch.dtype) -> list[torch.Tensor]:
        """The requested slots of one sequence, each [T, H] on the CPU in ``save_dtype``.

        ``slots``: HF indices (L = the last layer before the final norm) or "post-norm".
        """
        x = torch.tensor([ids], dtype=torch.long, device=self.input_device)
        self._seen.clear()
        out = self.base(input_ids=x, output_hidden_states=True, use_cache=False)
        res = [t.to("cpu", save_dtype) for t in self._pick(out.hidden_states, slots)]
        self._seen.clear()
        return res

    def _pick(self, hs: tuple[torch.Tensor, ...], slots: tuple) -> list[torch.Tensor]:
        """The requested slots of the forward that just ran, [Q, H] each (batch row 0)."""
        L = self.info.num_layers
        if "pre" not in self._seen or len(hs) != L + 1:
            raise RuntimeError(
                f"the model did not return {L + 1} hidden states through its final norm"
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
        self._seen.clear()
        out = self.model(input_ids=x, **kwargs)
        res = self._pick(out.hidden_states, slots)
        self._seen.clear()
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
        gen = torch.Generator().manual_seed(seed)
        # transformers renamed `past_key_values` to `cache` (argument and output) during 5.x.
        params = inspect.signature(self.model.forward).parameters
        kv = "cache" if "cache" in params else "past_key_values"
        x = torch.tensor([prompt], dtype=torch.long, device=self.input_device)
        out = self.model(input_ids=x, use_cache=True)
        new: list[int] = []
        for _ in range(n):
            logits = out.logits[0, -1].float().cpu()
            if temperature > 0:
                probs = torch.softmax(logits / temperature, -1)
                nxt = int(torch.multinomial(probs, 1, generator=gen))
            else:
                nxt = int(logits.argmax())
            new.append(nxt)
            if nxt in self.info.eos_ids or len(new) == n:
                break
            step = torch.tensor([[nxt]], dtype=torch.long, device=self.input_device)
            out = self.model(input_ids=step, use_cache=True, **{kv: getattr(out, kv)})
        self._seen.clear()
        return new
