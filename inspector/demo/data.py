"""Draft training data: real prompts, continuations written by the target, and speculators-v1 samples.

Why regenerate instead of using stdlib text directly: a draft learns to predict *the target*, and
plain text is far less predictable from the target's hidden states than the target's own output.
EAGLE-3 data pipelines regenerate responses for the same reason (demo-notes: plain text left the
draft at ~29% held-out).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from inspector.demo.tiny_target import Target

# HF output_hidden_states indices captured per sample, in speculators-v1 order:
# embedding output, layer-2 output, layer-4 output, last layer's output (pre final norm).
SLOT_HF_INDICES = (0, 2, 4, 6)
SLOT_LABELS = (
    "embed",
    "layer 2 output",
    "layer 4 output",
    "layer 6 output (pre-norm, verifier last state)",
)


@dataclass
class GeneratedSequence:
    """One generated sequence: ``prompt_len`` real tokens followed by the target's continuation."""

    ids: Tensor  # int64 [T]
    prompt_len: int

    @property
    def loss_mask(self) -> Tensor:
        """0 on the prompt, 1 on the generated continuation (speculators: assistant tokens only)."""
        m = torch.zeros(self.ids.numel(), dtype=torch.long)
        m[self.prompt_len :] = 1
        return m


def line_starts(doc: list[int], newline_ids: set[int]) -> list[int]:
    """Positions right after a token containing a newline: prompts start at a line, like real code."""
    return [i + 1 for i, t in enumerate(doc[:-1]) if t in newline_ids]


@torch.no_grad()
def generate(
    model: Target,
    prompts: Tensor,
    new_tokens: int,
    *,
    temperature: float,
    generator: torch.Generator,
    banned: Sequence[int] = (),
) -> Tensor:
    """Sample ``new_tokens`` continuations for a batch of equal-length prompts [B, P], with a KV cache.

    ``banned`` tokens (the end-of-text id) get zero probability so a sequence stays one document.
    """
    caches: list[list[Tensor]] = [[] for _ in model.layers]
    out = [prompts]
    logits = model(prompts, caches=caches, start_pos=0)[:, -1]
    pos = prompts.shape[1]
    for _ in range(new_tokens):
        logits = logits.float() / temperature
        if banned:
            logits[:, list(banned)] = float("-inf")
        nxt = torch.multinomial(torch.softmax(logits, -1), 1, generator=generator)
        out.append(nxt)
        logits = model(nxt, caches=caches, start_pos=pos)[:, -1]
        pos += 1
    return torch.cat(out, dim=1)


def make_sequences(
    model: Target,
    docs: list[list[int]],
    n: int,
    *,
    newline_ids: set[int],
    eos_id: int,
    seed: int,
    prompt_len: tuple[int, int] = (16, 40),
    total_len: tuple[int, int] = (128, 176),
    temperature: float = 0.7,
    batch: int = 32,
    progress: Callable[[str], None] = lambda s: None,
) -> list[GeneratedSequence]:
    """``n`` sequences: a short real prompt from ``docs`` plus a sampled continuation.

    Prompts within a batch share a length (so the batch needs no padding); every sequence is then cut
    to its own total length, which is exact because the model is causal.
    """
    g = torch.Generator().manual_seed(seed)
    lo_p, hi_p = prompt_len
    lo_t, hi_t = total_len
    candidates = [
        (d, s)
        for d, doc in enumerate(docs)
        for s in line_starts(doc, newline_ids)
        if s + hi_p <= len(doc)
    ]
    if not candidates:
        raise ValueError("no held-out document is long enough to cut prompts from")
    seqs: list[GeneratedSequence] = []
    while len(seqs) < n:
        b = min(batch, n - len(seqs))
        p = int(torch.randint(lo_p, hi_p + 1, (1,), generator=g))
        picks = torch.randint(0, len(candidates), (b,), generator=g).tolist()
        prompts = torch.tensor(
            [docs[candidates[i][0]][candidates[i][1] : candidates[i][1] + p] for i in picks]
        )
        full = generate(
            model, prompts, hi_t - p, temperature=temperature, generator=g, banned=[eos_id]
        )
        lengths = torch.randint(lo_t, hi_t + 1, (b,), generator=g).tolist()
        seqs.extend(GeneratedSequence(full[i, : lengths[i]].clone(), p) for i in range(b))
        progress(f"generated {len(seqs)}/{n} sequences")
    return seqs


@torch.no_grad()
def capture_slots(
    model: Target, seq: GeneratedSequence, layer_ids: Sequence[int] = SLOT_HF_INDICES
) -> list[Tensor]:
    """The speculators-v1 slots of one sequence, float32 [T, H] each: by default the demo's four
    (HF indices 0, 2, 4, 6; index 6 is the last layer's output before the final norm); any HF
    indices 0..L of the target otherwise (L: its last layer's output, pre-norm)."""
    hs: list[Tensor] = []
    model(seq.ids[None], hidden_states=hs)
    return [hs[i][0].float() for i in layer_ids]


def slot_labels(layer_ids: Sequence[int], num_layers: int) -> list[str]:
    """data_config.json's label of each HF index of an L-layer target (the demo's SLOT_LABELS)."""
    return [
        "embed"
        if k == 0
        else f"layer {k} output" + (" (pre-norm, verifier last state)" if k == num_layers else "")
        for k in layer_ids
    ]


def save_samples(
    folder: Path,
    records: list[dict],
    meta: dict,
    layer_ids: Sequence[int] = SLOT_HF_INDICES,
    labels: Sequence[str] = SLOT_LABELS,
) -> None:
    """Write ``data_{i}.pt`` (speculators v1) and ``data_config.json`` into ``folder`` (the
    slots' HF indices and labels: the demo's unless given)."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, rec in enumerate(records):
        torch.save(
            {
                "input_ids": rec["input_ids"].to(torch.int64).contiguous(),
                "hidden_states": [h.to(torch.bfloat16).contiguous() for h in rec["hidden_states"]],
                "loss_mask": rec["loss_mask"].to(torch.int64).contiguous(),
            },
            folder / f"data_{i}.pt",
        )
    lengths = {str(i): int(r["input_ids"].numel()) for i, r in enumerate(records)}
    (folder / "sample_lengths.json").write_text(json.dumps(lengths, indent=1) + "\n")
    (folder / "data_config.json").write_text(
        json.dumps(data_config(meta, len(records), layer_ids, labels), indent=2) + "\n"
    )


def data_config(
    meta: dict,
    n: int,
    layer_ids: Sequence[int] = SLOT_HF_INDICES,
    labels: Sequence[str] = SLOT_LABELS,
) -> dict:
    """speculators-style data_config.json, with the slot indices spelled out unambiguously."""
    return {
        "format": {"schema": "speculators-v1", "file_pattern": "data_{i}.pt", "num_samples": n},
        "hidden_states": {
            "layer_ids": list(layer_ids),
            "index_convention": "hf",
            "index_note": (
                "layer_ids are indices into HF output_hidden_states (0 = embedding output, "
                f"k = output of decoder layer k-1); the last one ({layer_ids[-1]}) is the final "
                "decoder layer's output taken BEFORE the final norm (the verifier's last state)"
            ),
            "labels": list(labels),
            "dtype": "bfloat16",
        },
        "loss_mask": "0 on the real prompt, 1 on the continuation sampled from the target",
        **meta,
    }
