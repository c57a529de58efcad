"""Serving-engine settings that feed a given wiring, and the serving_config finding.

Engines capture the configured layers and concatenate them in ascending layer order, so a wiring
is reproducible only when its slots' HF indices ascend along the fc blocks.

Index conventions (HF index k = `output_hidden_states[k]`, 0 = embedding output):
- vLLM `eagle_aux_hidden_state_layer_ids`: k. Id 0 (embedding) and id L (last layer, pre-norm)
  need the `EagleModelMixin` capture (vLLM PR #36063); the older capture crashes on 0 and never
  reaches L.
- SGLang `eagle_config.eagle_aux_hidden_state_layer_ids` before PR #25454: explicit ids get +1, so
  write k - 1 (-1 = embedding). Since #25454 the +1 applies only when the first id is 1: other
  lists are read as HF indices, and a first HF index of 1 cannot be written at all.
- SGLang captures before layer i (`hidden_states + residual`), so id -1 captures the embedding
  output only where the target's model file guards `residual is None` at layer 0, and the last
  layer's output (HF index L) is never reached.

Evidence of the finding: the serving_config itself. Fix: the config.json keys for both engines.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from inspector.doctor import wording
from inspector.doctor.report import Finding, WiringResult
from inspector.sample import SlotInfo

SGLANG_PR = "sgl-project/sglang PR #25454"
VLLM_PR = "vllm-project/vllm PR #36063"


def hf_indices(
    wiring: Sequence[int], infos: Sequence[SlotInfo], slot_layers: Sequence[int] | None = None
) -> list[int | None]:
    """HF index of each wired slot, in fc block order (None where unknown)."""
    out: list[int | None] = []
    for s in wiring:
        if slot_layers is not None and s < len(slot_layers):
            out.append(int(slot_layers[s]))
        elif s < len(infos):
            out.append(infos[s].hf_index)
        else:
            out.append(None)
    return out


def sglang_ids_since_25454(hf: Sequence[int]) -> list[int] | None:
    """Ids that select HF indices `hf` (ascending) in SGLang >= #25454, or None if none can."""
    if not hf:
        return None
    if hf[0] == 2:  # [1, ...] triggers the +1: write k - 1
        return [k - 1 for k in hf]
    if hf[0] == 1:  # as HF ids the list starts with 1 and gets +1; as k - 1 it starts with 0: no +1
        return None
    return list(hf)


def _vllm_launch(n_tokens: int) -> str:
    return (
        "vllm serve TARGET --speculative-config "
        f'\'{{"method": "eagle3", "model": "DRAFT", "num_speculative_tokens": {n_tokens}}}\''
    )


def _sglang_launch(n_tokens: int) -> str:
    return (
        "python -m sglang.launch_server --model-path TARGET --speculative-algorithm EAGLE3 "
        f"--speculative-draft-model-path DRAFT --speculative-num-steps {n_tokens}"
    )


def engine_configs(hf: Sequence[int], *, last_layer: int | None, n_tokens: int = 3) -> dict:
    """config.json keys + launch lines for SGLang and vLLM that capture the HF indices `hf`."""
    hf = sorted(hf)
    pre = [k - 1 for k in hf]
    since = sglang_ids_since_25454(hf)
    # (note, caveat): a caveat is a condition the engine must meet, which the finding repeats.
    sg_notes: list[tuple[str, bool]] = [
        (
            f"before {SGLANG_PR}: explicit ids are HF index - 1 ({pre}); SGLang reads them from "
            "eagle_config only, not from a top-level key",
            False,
        ),
        (
            "use --speculative-algorithm EAGLE3: under EAGLE an EAGLE-3 draft gets one state and "
            "fc is skipped (sglang PR #21272)",
            False,
        ),
    ]
    if since is None:
        sg_notes.append(
            (
                f"since {SGLANG_PR}: no id list selects HF indices {hf} (the +1 applies only "
                "when the first id is 1)",
                True,
            )
        )
    elif since != pre:
        sg_notes.append(
            (f"since {SGLANG_PR} (+1 only when the first id is 1): write {since}", False)
        )
    vl_notes = [("vLLM reads the top-level key first, then eagle_config", False)]
    if 0 in hf:
        sg_notes.append(
            (
                "id -1 (the embedding) needs a target model file that captures with a "
                "`residual is None` guard at layer 0; the plain llama.py raises there",
                True,
            )
        )
        vl_notes.append(
            (f"id 0 (the embedding) needs the EagleModelMixin capture ({VLLM_PR})", True)
        )
    if last_layer is not None and last_layer in hf:
        sg_notes.append(
            (
                f"HF index {last_layer} is the last layer's output, captured after the layer "
                "loop: SGLang's capture before layer i never reaches it",
                True,
            )
        )
        vl_notes.append(
            (
                f"id {last_layer} (last layer, pre-norm) needs the EagleModelMixin capture "
                f"({VLLM_PR})",
                True,
            )
        )
    return {
        "sglang": {
            "config": {
                "eagle_config": {
                    "eagle_aux_hidden_state_layer_ids": pre,
                    "use_aux_hidden_state": True,
                }
            },
            "layer_ids_before_pr25454": pre,
            "layer_ids_since_pr25454": since,
            "launch": _sglang_launch(n_tokens),
            "notes": [n for n, _ in sg_notes],
            "caveats": [n for n, c in sg_notes if c],
        },
        "vllm": {
            "config": {"eagle_aux_hidden_state_layer_ids": list(hf)},
            "launch": _vllm_launch(n_tokens),
            "notes": [n for n, _ in vl_notes],
            "caveats": [n for n, c in vl_notes if c],
        },
    }


def serving_config(
    wiring: Sequence[int],
    infos: Sequence[SlotInfo],
    *,
    slot_layers: Sequence[int] | None = None,
    n_tokens: int = 3,
    readings: Sequence[Sequence[int | None]] | None = None,
) -> dict:
    """The serving settings for `wiring`, as the report's `serving_config`.

    Keys: `hf_indices` (fc block order), `ascending`, `reproducible` (an engine can feed exactly
    this wiring; None when HF indices are unknown), `problems`, and `sglang` / `vllm` with the
    config.json keys, launch lines and caveats. For a wiring that is not ascending, the configs
    are those of the checkpoint `--write-fixed` writes (same slots, fc blocks permuted).

    readings: the slots' HF indices under each reading nothing decides between (see
    `slot_identity`); with more than one, no engine ids are given, since every id would depend on
    the guess: `undecided` lists the HF indices the wiring names in each reading instead.
    """
    hf = hf_indices(wiring, infos, slot_layers)
    if readings is not None and len(readings) > 1:
        return {
            "wiring": list(wiring),
            "hf_indices": [None] * len(hf),
            "ascending": None,
            "reproducible": None,
            "undecided": [[r[s] for s in wiring] for r in readings],
            "problems": [
                "the slots' HF indices depend on the convention of data_config.json's layer ids, "
                "which nothing decides: the wiring is HF "
                + " or HF ".join(str([r[s] for s in wiring]) for r in readings)
                + ", so any engine id would be a guess"
            ],
        }
    post = [s for s in wiring if s < len(infos) and infos[s].post_norm]
    last_layer = None
    for i, info in enumerate(infos):  # the verifier's last pre-norm state is HF index L
        if info.verifier and not info.post_norm:
            last_layer = (
                slot_layers[i]
                if slot_layers is not None and i < len(slot_layers)
                else info.hf_index
            )
    problems: list[str] = []
    out: dict = {"wiring": list(wiring), "hf_indices": hf, "ascending": None, "reproducible": None}
    if any(k is None for k in hf):
        problems.append(
            "the slots' HF indices are unknown: pass --slot-layers, or keep data_config.json "
            "beside the samples"
        )
        out["problems"] = problems
        return out
    ascending = all(a < b for a, b in zip(hf, hf[1:], strict=False))
    out["ascending"] = ascending
    if post:
        problems.append(
            "the wiring feeds the target's post-norm final state, which no engine captures as an "
            "aux layer"
        )
    if not ascending:
        problems.append(
            f"HF indices {hf} are not ascending: engines concatenate captured layers in ascending "
            "order, so no config reproduces this wiring; --write-fixed writes a checkpoint whose "
            "fc blocks are permuted so that the ascending order computes the same function"
        )
    out["reproducible"] = ascending and not post
    out["problems"] = problems
    out.update(engine_configs(hf, last_layer=last_layer, n_tokens=n_tokens))
    if not ascending:
        out["configs_for"] = "the --write-fixed checkpoint"
    return out


def slots_for_hf(
    hf: Sequence[int], infos: Sequence[SlotInfo], slot_layers: Sequence[int] | None = None
) -> tuple[int, ...] | None:
    """The wiring feeding HF indices `hf` in ascending order (what an engine does), or None."""
    by_hf: dict[int, int] = {}
    for i, info in enumerate(infos):
        k = slot_layers[i] if slot_layers is not None and i < len(slot_layers) else info.hf_index
        if k is not None and not info.post_norm and k not in by_hf:
            by_hf[k] = i
    try:
        return tuple(by_hf[k] for k in sorted(hf))
    except KeyError:
        return None


@dataclass
class ServingFacts:
    """The serving config is the serving finding's evidence."""

    config: dict

    def to_dict(self) -> dict:
        return self.config


def serving_finding(
    serving_cfg: dict, best: WiringResult, *, slots_reread: bool = False
) -> Finding:
    """How to configure the engines for `best` (an error when none can feed it).

    slots_reread: another reading of data_config.json's layer ids matters (see `layer_ids`), so
    the ids given depend on the convention assumed for it."""
    facts = ServingFacts(serving_cfg)
    ascending = serving_cfg.get("ascending")
    caveats: list[str] = []
    wiring = None
    if ascending is None:
        severity = "warning"  # unknown or undecided HF indices: no engine ids
    elif not ascending:
        severity = "error"
    else:
        caveats = [n for e in ("sglang", "vllm") for n in serving_cfg[e]["caveats"]]
        problems = serving_cfg.get("problems", [])
        # Caveats are conditions on the engine's version (which the summary states), not faults
        # of this draft or config: info, so a correctly configured draft gets no warning.
        severity = "error" if problems else "info"
        wiring = best.wiring
    text = wording.serving(serving_cfg, best.label, caveats, slots_reread)
    return Finding("serving_config", severity, text.summary, text.fix, facts, wiring=wiring)
