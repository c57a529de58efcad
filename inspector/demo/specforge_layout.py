"""The demo draft in SpecForge's layout: what `python -m inspector.demo specforge --out DIR` writes,
so the docs can run the doctor on a SpecForge draft without SpecForge installed.

SpecForge (sgl-project/SpecForge at a6b6b02, `specforge/export/to_sglang.py`) exports an EAGLE-3
draft as SGLang loads it:

- config.json: the flat LlamaConfig the draft was built from (`architectures:
  [LlamaForCausalLMEagle3]`, the decoder's keys at the top level, `draft_vocab_size`), the layer
  ids under `eagle_config.eagle_aux_hidden_state_layer_ids` in SGLang's reading (for a Llama
  target id i is HF index i + 1, so -1 is the embedding), a top-level `rope_theta` beside
  `rope_parameters` (`apply_legacy_rope_scaling`), keys sorted;
- model.safetensors: the module's state dict (`midlayer.*`, `fc`, `norm`, `lm_head`, `d2t`,
  `t2d`) without the keys naming `embed` (the target's embedding is loaded at serving).

The weights are the speculators draft's, renamed: the copy computes exactly what the original
does, and only what each engine reads from the config differs. The speculators-only keys go
(`speculators_config`, `transformer_layer_config`, the top-level HF ids, `target_hidden_size:
null`) and so do its flags that SpecForge's class reads otherwise or not at all: its
`norm_output` (SpecForge: whether the logits are normed, default true) and the false
`norm_before_residual`, `norm_before_fc`, `fc_norm`.
"""

from __future__ import annotations

import json
from pathlib import Path

from safetensors.torch import load_file

from inspector.engines import Engine
from inspector.engines.sglang_model_files import sglang_rule
from inspector.errors import InputError, setting_field
from inspector.formats.writer import DraftFiles, write_draft

# the engines' names from the registry (a rename is one edit in inspector/engines/)
_SGLANG = Engine.SGLANG.display

ARCHITECTURE = "LlamaForCausalLMEagle3"
# speculators keys SpecForge's LlamaConfig does not hold, or reads otherwise
DROPPED = (
    "architectures",
    "eagle_aux_hidden_state_layer_ids",
    "embed_requires_grad",
    "fc_norm",
    "norm_before_fc",
    "norm_before_residual",
    "norm_output",
    "speculators_config",
    "speculators_model_type",
    "speculators_version",
    "target_hidden_size",
    "transformer_layer_config",
)


def specforge_files(draft: Path, target: Path) -> DraftFiles:
    """The speculators draft folder `draft` (of the Llama-family `target`) as SpecForge's SGLang
    export holds it."""
    cfg = json.loads((draft / "config.json").read_text())
    layer = cfg.get("transformer_layer_config")
    hf = cfg.get("eagle_aux_hidden_state_layer_ids")
    if cfg.get("speculators_model_type") != "eagle3" or not isinstance(layer, dict) or not hf:
        raise InputError(draft, None, "not a speculators EAGLE-3 draft naming its layer ids")
    if layer.get("num_hidden_layers", 1) != 1:
        raise InputError(draft, None, "SpecForge's LlamaForCausalLMEagle3 holds one layer")
    rule = sglang_rule(json.loads((target / "config.json").read_text()))
    ids = rule.ids_for(list(hf)) if rule is not None else None  # fc block order, as given
    if ids is None:
        raise InputError(target, None, f"no {_SGLANG} id rule for this target class")
    flat = {k: v for k, v in cfg.items() if k not in DROPPED}
    flat.update(layer)
    flat["architectures"] = [ARCHITECTURE]
    flat["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": ids, "use_aux_hidden_state": True}
    theta = (flat.get("rope_parameters") or {}).get("rope_theta")
    if theta is not None:
        flat["rope_theta"] = theta
    tensors = {
        name.replace("layers.0.", "midlayer.", 1): t
        for name, t in load_file(draft / "model.safetensors").items()
        if "embed" not in name.lower()
    }
    return DraftFiles(config=flat, tensors=tensors, sort_keys=True)


def write_specforge_demo(out: Path, demo_root: Path) -> Path:
    """The demo draft in SpecForge's layout, written to the new folder `out`."""
    from inspector.demo_paths import DemoPaths

    demo = DemoPaths(demo_root)
    plan = specforge_files(demo.draft, demo.target)
    return write_draft(plan, out, inputs=[demo.root], field=setting_field("out"))
