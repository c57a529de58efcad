"""How tests/golden_speculators_block/ was made (documentation; the tests never run it).

speculators (0.9.0 on the package index, Red Hat, Apache-2.0: its
`speculators.models.dflash.DFlashDraftModel`) builds tiny random DFlash drafts in its own layout,
saves them with its own `save_pretrained` (config.json with `speculators_model_type: "dflash"`,
model.safetensors without the embedding and, full-vocabulary, without the head), loads them back
with its own `from_pretrained`, reloads the embedding and head from the verifier with its own
`load_verifier_weights`, and computes the logits of every anchored block of one sequence with its
own training forward (`_backbone_forward`): one block per anchor, [x_a, mask, ...] at positions
a..a+B-1 over the context rows before a, every row's logits (row 0 included).

Its anchors are drawn at random (`select_anchors`) among the positions a block fits after; with as
many anchors as positions (`max_anchors = T - block_size`) every position is drawn, in order: the
anchors are 0..T-B-1 whatever the draw. Attention is speculators' default (flex attention over
its compiled block mask; on CPU the compile needs a C compiler).

Every parameter is redrawn (seeded) before saving, as tests/golden_block/make_golden.py does. No
speculators code is copied: this script imports it.

Run it in a scratch environment, never in the project's:

    python -m venv /tmp/spec-venv
    /tmp/spec-venv/bin/pip install torch==2.13.0            # the CPU wheel
    /tmp/spec-venv/bin/pip install --no-deps speculators==0.9.0
    /tmp/spec-venv/bin/pip install transformers==5.15.0 safetensors pydantic pydantic-settings \
        loguru huggingface-hub numpy rich typer click psutil protobuf openai httpx aiohttp \
        tqdm datasets hs-connectors                        # what `import speculators` needs
    /tmp/spec-venv/bin/python tests/golden_speculators_block/make_golden.py \
        tests/golden_speculators_block tests/golden_block/target

Cases (expected.safetensors `<case>.logits` [A, B, V] float32, the anchors in `<case>.anchors`;
inputs.safetensors holds the sequence: `input_ids` [T] and `hidden_states` [T, 3H], the target's
states at the three aux layers, concatenated in fc order), all on one set of weights:

- `full`: two full-attention layers (bidirectional blocks, no window);
- `swa`: layer 0 a sliding layer of window 5 (causal: `sliding_window_non_causal` false), layer 1
  full; the window is measured from the anchor over the context keys;
- `swa_noncausal`: the same with `sliding_window_non_causal` true.

DSpark (speculators' `DSparkDraftModel`: DFlash's network, a Markov head and a confidence head;
its defaults: `sample_from_anchor` true, every row drafts) in `dspark_vanilla` and `dspark_gated`
(`markov_rank` 8, full layers, weights of their own): `<case>.logits` [A, B, V] are the logits its
training forward scores, the Markov bias of the true token before each row included, as its
`forward` hands them to `compute_metrics` (which this script wraps to keep them; the forward itself
runs unchanged).

The target is tests/golden_block/target (embedding and head of 256 tokens, hidden size 64).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import math
import os
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn

H, HEADS, KV_HEADS, HEAD_DIM, INTER, VOCAB = 64, 4, 2, 16, 96, 256
AUX = [2, 5, 7]  # HF hidden_states indices, as speculators writes them
BLOCK = 4
MASK = 250
T = 20
CASES = {
    "full": {"layer_types": ["full_attention", "full_attention"], "use_sliding_window": False},
    "swa": {
        "layer_types": ["sliding_attention", "full_attention"],
        "use_sliding_window": True,
        "sliding_window": 5,
    },
    "swa_noncausal": {
        "layer_types": ["sliding_attention", "full_attention"],
        "use_sliding_window": True,
        "sliding_window": 5,
        "sliding_window_non_causal": True,
    },
}


def _module(name: str):
    """One of speculators' modules, imported by `main` only: this script runs in a scratch venv
    that holds speculators (see above); the test environment reads the files it wrote and never
    imports speculators."""
    try:
        return importlib.import_module(name)
    except ImportError:
        sys.exit(
            "make_golden.py writes what speculators computes: run it where "
            "`pip install --no-deps speculators==0.9.0` was done (see this file's docstring)"
        )


def _imports():
    config = _module("speculators.config")
    dflash = _module("speculators.models.dflash")
    greedy = _module("speculators.proposals.greedy")
    return (
        config.SpeculatorsConfig,
        config.VerifierConfig,
        dflash.DFlashDraftModel,
        dflash.DFlashSpeculatorConfig,
        greedy.GreedyTokenProposalConfig,
    )


def _redraw(model: nn.Module, seed: int) -> None:
    """Every trained parameter redrawn: linears ~ N(0, 1/fan_in), norms 1 + 0.2 N (the verifier's
    embedding and head are reloaded from the target afterwards)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            z = torch.randn(p.shape, generator=gen)
            if "norm" in name:
                p.copy_(1.0 + 0.2 * z)
            elif p.dim() == 2:
                p.copy_(z / math.sqrt(p.shape[1]))
            else:
                p.copy_(0.3 * z)


def _config(mods, target: Path, case: dict):
    speculators_config, verifier_config, _, config_cls, greedy = mods
    from transformers import Qwen3Config

    layer_keys = {k: v for k, v in case.items() if k != "sliding_window_non_causal"}
    tl = Qwen3Config(
        hidden_size=H,
        intermediate_size=INTER,
        num_hidden_layers=2,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM,
        vocab_size=VOCAB,
        rms_norm_eps=1e-6,
        max_position_embeddings=256,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        **layer_keys,
    )
    return config_cls(
        transformer_layer_config=tl,
        draft_vocab_size=VOCAB,
        block_size=BLOCK,
        aux_hidden_state_layer_ids=AUX,
        mask_token_id=MASK,
        sliding_window_non_causal=case.get("sliding_window_non_causal", False),
        speculators_config=speculators_config(
            algorithm="dflash",
            proposal_methods=[greedy(speculative_tokens=BLOCK - 1)],
            default_proposal_method="greedy",
            verifier=verifier_config(name_or_path=str(target), architectures=["Qwen3ForCausalLM"]),
        ),
    )


def _save(model: nn.Module, folder: Path) -> None:
    model.save_pretrained(str(folder), safe_serialization=True)
    for extra in folder.iterdir():
        if extra.name not in ("config.json", "model.safetensors"):
            extra.unlink()
    # the verifier's path relative to tests/ (where main runs), not this machine's
    cfg = json.loads((folder / "config.json").read_text())
    cfg["speculators_config"]["verifier"]["name_or_path"] = "golden_block/target"
    (folder / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")


def _load(mods, folder: Path):
    """speculators' own from_pretrained, which reloads the verifier's embedding and head."""
    model = mods[2].from_pretrained(str(folder)).float().eval()
    assert not model.embed_tokens.weight.isnan().any() and not model.lm_head.weight.isnan().any()
    return model


DSPARK = {"dspark_vanilla": "vanilla", "dspark_gated": "gated"}
MARKOV_RANK = 8


def _dspark(out: Path, target: Path, hidden, ids, gen, expected: dict) -> None:
    """The DSpark cases: speculators' own DSpark forward over the same sequence."""
    from transformers import Qwen3Config

    core = _module("speculators.models.dspark.core")
    SpeculatorsConfig, VerifierConfig, _, _, GreedyTokenProposalConfig = _imports()
    dspark = _module("speculators.models.dspark")
    DSparkDraftModel, DSparkSpeculatorConfig = (
        dspark.DSparkDraftModel,
        dspark.DSparkSpeculatorConfig,
    )

    kept = {}
    metrics = core.compute_metrics

    def keep(logits, *args, **kwargs):
        kept["logits"] = logits.detach().clone()
        return metrics(logits, *args, **kwargs)

    core.compute_metrics = keep
    for seed, (name, kind) in enumerate(DSPARK.items(), start=7):
        tl = Qwen3Config(
            hidden_size=H,
            intermediate_size=INTER,
            num_hidden_layers=2,
            num_attention_heads=HEADS,
            num_key_value_heads=KV_HEADS,
            head_dim=HEAD_DIM,
            vocab_size=VOCAB,
            rms_norm_eps=1e-6,
            max_position_embeddings=256,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
        cfg = DSparkSpeculatorConfig(
            transformer_layer_config=tl,
            draft_vocab_size=VOCAB,
            block_size=BLOCK,
            aux_hidden_state_layer_ids=AUX,
            mask_token_id=MASK,
            markov_rank=MARKOV_RANK,
            markov_head_type=kind,
            speculators_config=SpeculatorsConfig(
                algorithm="dspark",
                proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=BLOCK)],
                default_proposal_method="greedy",
                verifier=VerifierConfig(
                    name_or_path=str(target), architectures=["Qwen3ForCausalLM"]
                ),
            ),
        )
        built = DSparkDraftModel(cfg).float()
        _redraw(built, seed=seed)
        folder = out / name
        shutil.rmtree(folder, ignore_errors=True)
        _save(built, folder)
        model = DSparkDraftModel.from_pretrained(str(folder)).float().eval()
        assert model.config.sample_from_anchor and model.markov_head is not None
        n_anchors = T - BLOCK
        # its own loss settings, eager (the fused losses need Triton)
        train, _ = DSparkDraftModel.get_trainer_kwargs(
            loss_fn="kl_div", loss_implementation="eager"
        )
        train["max_anchors"] = n_anchors
        with torch.no_grad():
            model(
                hidden,
                ids,
                torch.ones(1, T, dtype=torch.long),
                torch.randn(1, T, H, generator=gen),
                torch.zeros(1, T, dtype=torch.long),
                **train,
            )
        expected[f"{name}.logits"] = kept["logits"].view(n_anchors, BLOCK, VOCAB).contiguous()
        expected[f"{name}.anchors"] = torch.arange(n_anchors)
    core.compute_metrics = metrics


def main(out: Path, target: Path) -> None:
    mods = _imports()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(5)
    out.mkdir(parents=True, exist_ok=True)
    out, target = out.resolve(), target.resolve()
    os.chdir(target.parent.parent)  # tests/: the saved configs name the verifier from there
    hidden = torch.randn(1, T, len(AUX) * H, generator=gen)
    ids = torch.randint(0, MASK, (1, T), generator=gen)
    inputs = {"hidden_states": hidden[0].clone(), "input_ids": ids[0].clone()}
    expected: dict[str, torch.Tensor] = {}
    weights = None
    for name, case in CASES.items():
        folder = out / name
        shutil.rmtree(folder, ignore_errors=True)
        built = mods[2](_config(mods, target, case)).float()
        if weights is None:
            _redraw(built, seed=6)
            weights = {k: v.clone() for k, v in built.state_dict().items()}
        else:
            built.load_state_dict(weights)
        _save(built, folder)
        model = _load(mods, folder)
        n_anchors = T - BLOCK
        with torch.no_grad():
            _, logits, _, _, indices = model._backbone_forward(
                hidden,
                ids,
                torch.ones(1, T, dtype=torch.long),
                torch.randn(1, T, H, generator=gen),  # the verifier's last states: targets only
                torch.zeros(1, T, dtype=torch.long),
                max_anchors=n_anchors,
            )
        anchors = indices.view(n_anchors, BLOCK)[:, 0]
        assert torch.equal(anchors, torch.arange(n_anchors)), anchors
        expected[f"{name}.logits"] = logits.view(n_anchors, BLOCK, VOCAB).contiguous()
        expected[f"{name}.anchors"] = anchors.clone()
    _dspark(out, target, hidden, ids, gen, expected)
    # one set of weights: the other cases keep their config.json only (the test puts the
    # weights of `full` beside it)
    for name in CASES:
        if name != "full":
            os.remove(out / name / "model.safetensors")
    save_file(inputs, str(out / "inputs.safetensors"))
    save_file(expected, str(out / "expected.safetensors"))
    meta = {
        "reference": f"speculators {importlib.metadata.version('speculators')}",
        "torch": torch.__version__,
        "transformers": importlib.metadata.version("transformers"),
        "aux_hidden_state_layer_ids": AUX,
        "block_size": BLOCK,
        "mask_token_id": MASK,
        "cases": CASES,
        "dspark": DSPARK,
        "markov_rank": MARKOV_RANK,
        "logits_rms": {
            k: float(v.double().pow(2).mean().sqrt())
            for k, v in expected.items()
            if k.endswith(".logits")
        },
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
