"""Files -> canonical objects: draft checkpoints, samples, target tensors, tokenizers."""

from inspector.formats.checkpoint import load_draft
from inspector.formats.samples import SampleSet, load_sample
from inspector.formats.target import TargetHead, read_embedding, read_target_head

__all__ = [
    "SampleSet",
    "TargetHead",
    "load_draft",
    "load_sample",
    "read_embedding",
    "read_target_head",
]
