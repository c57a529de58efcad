"""Every layer of the target over the doctor's first samples, for the block wiring search
(`block_search`) where the samples hold only some of them.

With `--target` the doctor of a block draft runs the target under transformers (the capture's own
`TargetModel`, as `eagle-inspect capture` runs it) over each sample's first tokens and keeps every
HF state 0..L of them in memory: the search then chooses among all the layers a capture can give,
not only among those the samples were captured with. Only the rows the search reads are run: the
anchors it scores lie among a sample's first `SCORE_TOKENS` tokens, and their blocks' true tokens
within block_size more; a causal target's states there are those of the whole sample.

The states kept are (L + 1) x rows x H in the target's dtype a sample: 62 x 1028 x 5120 in bf16
is 0.65 GB, so 8 samples of a 61-layer 5120-wide target are 5.2 GB. Past `CAPTURE_BYTES` fewer
samples are captured (a note says how many); where one sample alone is past it, none (a note).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from inspector.doctor.wiring.block_search import SCORE_TOKENS
from inspector.errors import InputError
from inspector.sample import Sample, SlotInfo

CAPTURE_BYTES = 4 << 30  # every layer's states of the captured samples, held in memory


@dataclass(frozen=True)
class BlockCapture:
    """What the capture gave the search: the layers the samples lacked, over how many of them."""

    layers: tuple[int, ...]  # HF indices the capture added
    samples: int  # how many samples were captured (the search ran on these alone)
    of: int  # how many the doctor read
    tokens: int  # rows run, all samples together
    nbytes: int  # the states held

    def to_dict(self) -> dict:
        return {
            "layers": list(self.layers),
            "samples": self.samples,
            "of_samples": self.of,
            "tokens": self.tokens,
            "bytes": self.nbytes,
        }

    def line(self) -> str:
        return (
            f"HF {list(self.layers)} captured from the target over {self.samples} of the "
            f"{self.of} samples ({self.tokens} tokens, {_size(self.nbytes)} held)"
        )


def _size(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def held_layers(sample: Sample) -> set[int]:
    return {s.hf_index for s in sample.slot_info if s.hf_index is not None and not s.post_norm}


def _labels(n: int) -> list[SlotInfo]:
    out = [SlotInfo("embed", 0)]
    out += [SlotInfo(f"L{k}", k, verifier=(k == n)) for k in range(1, n + 1)]
    return out


def capture_every_layer(
    target: str | Path,
    samples: Sequence[Sample],
    block_size: int,
    device: torch.device,
    budget: int = CAPTURE_BYTES,
) -> tuple[list[Sample] | None, BlockCapture | None, list[str]]:
    """(the samples with every layer HF 0..L as their slots, what was captured, notes), or
    (None, None, notes) where nothing was: the samples hold every layer already, the target
    cannot be run here, or one sample's states are past `budget`. Never raises for an unusable
    target: the notes say why."""
    from inspector.capture.transformers_target import read_target_info
    from inspector.doctor.checks.target_slots import too_big

    if not samples:
        return None, None, []
    try:
        info = read_target_info(target)
    except InputError as e:
        return None, None, [f"no capture of the layers the samples lack: {e}"]
    n = info.num_layers
    lacking = tuple(k for k in range(n + 1) if k not in held_layers(samples[0]))
    if not lacking:
        return None, None, []
    why = too_big(Path(target), device)
    if why is not None:
        return None, None, [f"no capture of HF {list(lacking)}: {why}"]
    try:
        from inspector.capture.transformers_target import TargetModel

        model = TargetModel(target, device="cpu" if device.type == "cpu" else "auto")
    except ImportError:
        return None, None, ["no capture of the layers the samples lack: transformers is missing"]
    except InputError as e:
        return None, None, [f"no capture of HF {list(lacking)}: {e}"]
    width = model.model.get_input_embeddings().weight.shape[-1]
    itemsize = torch.empty((), dtype=model.dtype).element_size()
    rows = [min(s.length, SCORE_TOKENS + block_size) for s in samples]
    per_row = (n + 1) * width * itemsize
    keep, nbytes = 0, 0
    for r in rows:
        if nbytes + r * per_row > budget:
            break
        keep, nbytes = keep + 1, nbytes + r * per_row
    notes: list[str] = []
    if keep == 0:
        return (
            None,
            None,
            [
                f"no capture of HF {list(lacking)}: one sample's {n + 1} layers take "
                f"{_size(rows[0] * per_row)}, past the {_size(budget)} budget"
            ],
        )
    if keep < len(samples):
        notes.append(
            f"the capture of every layer keeps {keep} of the {len(samples)} samples "
            f"({_size(nbytes)} of a {_size(budget)} budget): the search runs "
            "on those"
        )
    layers = tuple(range(n + 1))
    infos = _labels(n)
    out: list[Sample] = []
    for s, r in zip(samples[:keep], rows, strict=False):
        p = s.prefix(r)
        got = model.slots(p.input_ids.tolist(), layers, model.dtype)
        out.append(replace(p, slots=got, slot_info=list(infos), continuation=None))
    del model
    cap = BlockCapture(lacking, keep, len(samples), sum(rows[:keep]), nbytes)
    return out, cap, notes
