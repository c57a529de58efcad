"""What a session works on, and the one loader behind every view: the CLI commands and the app.

    inputs = Inputs(checkpoint, samples, target=..., ...)   # or demo_inputs()
    ev = load_evaluator(inputs, device="auto", ttt_steps=3)
    decoder, notes = load_decoder(inputs)

torch is imported inside `load_evaluator`, never at module load, so the app can paint first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from inspector.errors import InputError

if TYPE_CHECKING:
    from inspector.evaluate import Evaluator
    from inspector.formats.tokenizer import TokenDecoder


@dataclass
class Inputs:
    """The files a session reads (never writes)."""

    checkpoint: Path
    samples: list[str]
    target: Path | None = None
    embed: Path | None = None
    tokenizer: Path | None = None
    is_demo: bool = False
    slot_layers: list[int] | None = None  # HF index of every slot (--slot-layers)
    notes: list[str] = field(default_factory=list)  # for the user: stderr or the app's status

    def paths(self) -> list[str]:
        """Every folder or file read (an export or a fix never goes there)."""
        paths = [str(self.checkpoint), *map(str, self.samples)]
        for p in (self.target, self.embed, self.tokenizer):
            if p is not None:
                paths.append(str(p))
        return paths


def demo_inputs(
    samples: list[str] | None = None,
    *,
    target: Path | None = None,
    embed: Path | None = None,
    tokenizer: Path | None = None,
    slot_layers: list[int] | None = None,
) -> Inputs:
    """The bundled demo: its draft, samples/train (unless given), its target and tokenizer."""
    from inspector.demo_paths import demo_paths

    demo = demo_paths()
    return Inputs(
        demo.draft,
        list(samples or []) or [str(demo.train_samples)],
        target or demo.target,
        embed,
        tokenizer or demo.tokenizer,
        True,
        slot_layers,
    )


def load_evaluator(
    inputs: Inputs,
    *,
    device: str = "auto",
    dtype: str = "auto",
    ttt_steps: int = 1,
    strict: bool = True,
    memory_budget: str | None = None,
) -> Evaluator:
    """Load everything onto the device and return an Evaluator (torch imported here, not before).

    strict=False (the doctor) loads a faulty d2t or a missing head_dim so they can be reported.
    """
    from inspector.evaluate import Evaluator, resolve_device
    from inspector.formats import SampleSet, load_draft, read_target_head
    from inspector.formats.layer_convention import target_layer_count
    from inspector.memory import resolve_budget

    dev = resolve_device(device)
    budget = resolve_budget(memory_budget, dev)
    draft = load_draft(
        inputs.checkpoint,
        embed=inputs.embed,
        target=inputs.target,
        dtype=dtype,
        device=dev,
        strict=strict,
    )
    cfg = draft.config
    # The target's layer count is evidence for what data_config.json's layer ids mean.
    n_layers = target_layer_count(inputs.target) if inputs.target is not None else None
    samples = SampleSet(
        inputs.samples,
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.target_hidden_size,
        num_layers=n_layers,
    )
    head = None
    if inputs.target is not None:
        head = read_target_head(
            inputs.target, vocab_size=cfg.vocab_size, hidden_size=cfg.target_hidden_size
        ).to(dev, draft.dtype)
    return Evaluator(
        draft,
        samples,
        ttt_steps=ttt_steps,
        target_head=head,
        budget=budget,
        slot_layers=inputs.slot_layers,
    )


def load_decoder(inputs: Inputs) -> tuple[TokenDecoder, list[str]]:
    """The token decoder for these inputs (ids only when no tokenizer.json is found), and notes."""
    from inspector.formats.tokenizer import TokenDecoder, find_tokenizer

    try:
        path = find_tokenizer(inputs.tokenizer, inputs.checkpoint, inputs.target)
        return TokenDecoder.load(path), []
    except InputError as e:
        return TokenDecoder(), [f"tokenizer: {e}; showing token ids"]
