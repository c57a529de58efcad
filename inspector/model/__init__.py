"""The EAGLE-3 draft forward pass in plain torch, as the trainers (EAGLE, SpecForge, speculators)
and the engines (vLLM, SGLang) compute it.

Row j of a sample combines the wired slots at position j with the embedding of x_{j+1} and
predicts x_{j+2}. Teacher-forced TTT step k feeds the previous step's pre-norm output at the same
row, the token x_{j+1+k}, and positions shifted by k; it attends causally to the step-0 keys and to
its own row's keys of steps 1..k (the "diagonal").

Everything here is differentiable and batch-agnostic ([T, ...] or [B, T, ...]), so the demo builder
trains the draft with this very code. Norms and softmax run in float32 whatever the weights' dtype.
"""

from inspector.draft import Draft, DraftConfig, RopeConfig, VocabMap
from inspector.model.attention import DEFAULT_CHUNKING, Chunking, LayerCache, causal_attention_lse
from inspector.model.forward import (
    draft_layer,
    draft_logits,
    fc_block_project,
    fc_combine,
    fc_input,
    fc_project,
    fc_wired,
    forward_steps,
    iter_steps,
    mlp,
)
from inspector.model.rope import apply_rope, rms_norm, rope_cos_sin, rope_inv_freq
from inspector.model.step0 import Step0Shared, step0_logits_at_rows

__all__ = [
    "DEFAULT_CHUNKING",
    "Chunking",
    "Draft",
    "LayerCache",
    "DraftConfig",
    "RopeConfig",
    "Step0Shared",
    "VocabMap",
    "apply_rope",
    "causal_attention_lse",
    "draft_layer",
    "draft_logits",
    "fc_block_project",
    "fc_combine",
    "fc_input",
    "fc_project",
    "fc_wired",
    "forward_steps",
    "iter_steps",
    "mlp",
    "rms_norm",
    "rope_cos_sin",
    "rope_inv_freq",
    "step0_logits_at_rows",
]
