"""The EAGLE-3 draft forward pass in plain torch, as the trainers (EAGLE, SpecForge, speculators)
and the engines (vLLM, SGLang) compute it.

Row j of a sample combines the wired slots at position j with the embedding of x_{j+1} and
predicts x_{j+2}. Teacher-forced TTT step k feeds the previous step's pre-norm output at the same
row, the token x_{j+1+k}, and positions shifted by k; it attends causally to the step-0 keys and to
its own row's keys of steps 1..k (the "diagonal").

Where each part lives: `fc` (the slots' projection), `weights` (a layer's typed tensors),
`decoder` (one decoder layer, `layer()`), `attention` (the one attention entry point and its caches),
`forward` (one draft step and the TTT steps), `heads` (logits, top-k log-probs), `step0` (the
doctor's step 0 at chosen rows for many wirings), `rope`, `linear`.

Everything here is differentiable and batch-agnostic ([T, ...] or [B, T, ...]), so the demo builder
trains the draft with this very code. Norms and softmax run in float32 whatever the weights' dtype.
"""

from inspector.draft import Draft, DraftConfig, RopeConfig, VocabMap
from inspector.model.attention import (
    CAUSAL,
    DEFAULT_CHUNKING,
    AttendSpec,
    Chunking,
    LayerCache,
    attend,
    causal_attention_lse,
)
from inspector.model.decoder import layer, mlp
from inspector.model.fc import fc_block_project, fc_combine, fc_input, fc_project, fc_wired
from inspector.model.forward import draft_step, forward_steps, iter_steps, next_input
from inspector.model.heads import draft_logits, stable_topk, topk_logprobs
from inspector.model.rope import apply_rope, rms_norm, rope_cos_sin, rope_inv_freq
from inspector.model.step0 import Step0Shared, step0_at_rows, step0_logits_at_rows
from inspector.model.weights import LayerWeights, resolve_layers

__all__ = [
    "CAUSAL",
    "DEFAULT_CHUNKING",
    "AttendSpec",
    "Chunking",
    "Draft",
    "DraftConfig",
    "LayerCache",
    "LayerWeights",
    "RopeConfig",
    "Step0Shared",
    "VocabMap",
    "apply_rope",
    "attend",
    "causal_attention_lse",
    "draft_logits",
    "draft_step",
    "fc_block_project",
    "fc_combine",
    "fc_input",
    "fc_project",
    "fc_wired",
    "forward_steps",
    "iter_steps",
    "layer",
    "mlp",
    "next_input",
    "resolve_layers",
    "rms_norm",
    "rope_cos_sin",
    "rope_inv_freq",
    "stable_topk",
    "step0_at_rows",
    "step0_logits_at_rows",
    "topk_logprobs",
]
