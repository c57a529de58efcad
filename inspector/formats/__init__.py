"""Files -> canonical objects (draft checkpoints, samples, target tensors, tokenizers), and the
one writer of draft checkpoints. docs/formats.md describes the formats and the rules."""

from inspector.formats.block_draft import load_block_draft
from inspector.formats.checkpoint import load_draft, rope_config
from inspector.formats.sample_set import SampleSet, SampleWarning, SkippedSample
from inspector.formats.samples import load_sample
from inspector.formats.target_tensors import TargetHead, read_embedding, read_target_head
from inspector.formats.writer import DraftFiles, write_draft

__all__ = [
    "DraftFiles",
    "SampleSet",
    "SampleWarning",
    "SkippedSample",
    "TargetHead",
    "load_block_draft",
    "load_draft",
    "load_sample",
    "read_embedding",
    "read_target_head",
    "rope_config",
    "write_draft",
]
