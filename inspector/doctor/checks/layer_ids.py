"""Layer-id conventions: how the draft's config and the samples name captured layers.

HF index k is `output_hidden_states[k]` of the target: 0 the embedding output, k (1..L-1) the
output of decoder layer k-1, L the last layer's output (pre-norm as engines capture it).

Who writes which convention:
- config.json `eagle_aux_hidden_state_layer_ids` (vLLM, speculators >= v0.5): id = HF index.
- config.json `eagle_config.eagle_aux_hidden_state_layer_ids` (SGLang): before sglang PR #25454
  an explicit id i captures HF index i + 1 (-1 = the embedding); since that PR the +1 applies
  only when the first id is 1, other lists are read as HF indices.
- data_config.json `hidden_states.layer_ids`: speculators up to v0.4 wrote decoder-layer output
  ids (HF index = id + 1); sets written with vLLM-convention ids (speculators >= v0.5
  `--target-layer-ids`, our capture) hold HF indices. Which one a file holds is decided from its
  evidence (`formats.layer_convention`, `slot_identity`); the reader assumes the former only when
  nothing decides.
- SpecForge `aux_hidden_states_layers`: the output of layer i, HF index i + 1.
- a llama.cpp GGUF's `eagle3.target_layers`: id i is the input of target layer i (llama.cpp's
  `t_layer_inp[i]`), HF index i; llama.cpp reads them so and only so (the source states its
  convention), and feeds them in the order listed, not sorted (`capture.conventions`).

So one list of ids can name two sets of layers. The doctor reads each source under its decided
(or assumed) convention and, where nothing decides it, also under the other one: when the
draft's ids match no captured slot as read, another reading may select exactly the wiring the
draft fits best. `--slot-layers` (doctor, eval, open) sets the slots' HF indices outright.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from inspector.doctor.checks.slot_identity import OVERRIDE, TARGET, SlotIdentity
from inspector.doctor.serving import slots_for_hf
from inspector.draft import DraftConfig
from inspector.engines import Engine
from inspector.engines.capture import EAGLE_CONFIG, LLAMA_CPP, LLAMA_CPP_KEY, TOP_LEVEL
from inspector.errors import InputError
from inspector.formats.layer_convention import read_layer_ids
from inspector.formats.tensorfiles import read_json
from inspector.sample import SlotInfo
from inspector.wiring import id_readings

# the engines' names from the registry (a rename is one edit in inspector/engines/)
_LLAMACPP, _SGLANG, _VLLM = (
    Engine.LLAMACPP.display,
    Engine.SGLANG.display,
    Engine.VLLM.display,
)

HF = TOP_LEVEL  # id = HF index
LAYER_OUTPUT = "layer_output"  # id = the decoder layer whose output is captured: HF index id + 1
SGLANG = EAGLE_CONFIG  # SGLang eagle_config ids, before / since PR #25454

DRAFT_KEYS = {
    HF: "config.json eagle_aux_hidden_state_layer_ids",
    SGLANG: "config.json eagle_config.eagle_aux_hidden_state_layer_ids",
    LLAMA_CPP: f"GGUF {LLAMA_CPP_KEY}",
}


def hf_of(ids: Sequence[int], convention: str) -> tuple[int, ...]:
    """HF indices of ids written in `convention` (HF or LAYER_OUTPUT)."""
    return tuple(int(i) + (1 if convention == LAYER_OUTPUT else 0) for i in ids)


def well_formed(hf: Sequence[int]) -> bool:
    """Whether HF indices name each layer once and none below 0 (the embedding, HF 0)."""
    return len(set(hf)) == len(hf) and all(k >= 0 for k in hf)


def configured_hf_ids(aux_ids: Sequence[int] | None, convention: str | None) -> list[list[int]]:
    """HF indices a config's aux ids select: one list, or two for SGLang (before / since #25454)."""
    return id_readings(aux_ids, convention)


@dataclass(frozen=True)
class IdSource:
    """Ids one source names, the convention they were read in, and the HF indices that gives.

    stated: the source states its convention (or is the --slot-layers override): no other reading.
    hf: the HF indices read (two lists for SGLang ids: before / since PR #25454).
    """

    where: str
    ids: tuple[int, ...]
    convention: str
    stated: bool
    hf: tuple[tuple[int, ...], ...]
    decided_by: str | None = field(default=None, compare=False)  # what decided the reading

    def to_dict(self) -> dict:
        out = {
            "where": self.where,
            "ids": list(self.ids),
            "convention": self.convention,
            "stated": self.stated,
            "hf_indices": [list(h) for h in self.hf],
        }
        if self.decided_by is not None:
            out["decided_by"] = self.decided_by
        return out


@dataclass(frozen=True)
class Reading:
    """Another reading of the sources: the conventions, the slots' HF indices under it, and the
    wiring the draft's ids then select (its label in that reading's slot names)."""

    draft_convention: str
    slots_convention: str
    slot_hf: tuple[int | None, ...]
    config_hf: tuple[int, ...]
    wiring: tuple[int, ...]
    label: str
    is_best: bool

    @property
    def rereads_slots(self) -> bool:
        return self.slots_convention == HF

    def to_dict(self) -> dict:
        return {
            "draft_convention": self.draft_convention,
            "slots_convention": self.slots_convention,
            "slot_hf_indices": list(self.slot_hf),
            "config_hf_indices": list(self.config_hf),
            "wiring": list(self.wiring),
            "label": self.label,
            "is_best": self.is_best,
        }


@dataclass
class LayerIdFacts:
    """draft: the config's aux ids (None: it names none); slots: where the slots' HF indices
    came from (None: unknown). configured: the wiring the ids select as assumed."""

    draft: IdSource | None
    slots: IdSource | None
    slot_hf: tuple[int | None, ...]
    configured: tuple[int, ...] | None = None
    configured_hf: tuple[int, ...] | None = None
    readings: list[Reading] = field(default_factory=list)

    @property
    def best_readings(self) -> list[Reading]:
        return [r for r in self.readings if r.is_best]

    def to_dict(self) -> dict:
        return {
            "draft": self.draft.to_dict() if self.draft is not None else None,
            "slots": self.slots.to_dict() if self.slots is not None else None,
            "slot_hf_indices": list(self.slot_hf),
            "configured": list(self.configured) if self.configured is not None else None,
            "configured_hf_indices": list(self.configured_hf) if self.configured_hf else None,
            "other_readings": [r.to_dict() for r in self.readings],
        }


def draft_source(cfg: DraftConfig) -> IdSource | None:
    if not cfg.aux_layer_ids:
        return None
    conv = cfg.aux_layer_convention or HF
    hf = tuple(tuple(h) for h in configured_hf_ids(cfg.aux_layer_ids, conv))
    where = DRAFT_KEYS.get(conv, DRAFT_KEYS[HF])
    # llama.cpp reads a GGUF's ids one way only: no other reading of them serves
    stated = conv == LLAMA_CPP
    return IdSource(
        where, tuple(cfg.aux_layer_ids), conv, stated, hf, LLAMA_CPP if stated else None
    )


def _slots_in_order(hf: Sequence[int], infos: Sequence[SlotInfo]) -> tuple[int, ...] | None:
    """The wiring feeding HF indices `hf` in the order listed (llama.cpp's), or None."""
    by_hf: dict[int, int] = {}
    for i, info in enumerate(infos):
        if info.hf_index is not None and not info.post_norm:
            by_hf.setdefault(info.hf_index, i)
    try:
        return tuple(by_hf[k] for k in hf)
    except KeyError:
        return None


def _without_convention(cfg: dict) -> dict:
    out = {k: v for k, v in cfg.items() if k != "index_convention"}
    if isinstance(cfg.get("hidden_states"), dict):
        hs = cfg["hidden_states"]
        out["hidden_states"] = {k: v for k, v in hs.items() if k != "index_convention"}
    return out


def slots_source(
    infos: Sequence[SlotInfo],
    override: Sequence[int] | None,
    data_config: Path | None,
    identity: SlotIdentity | None = None,
) -> IdSource | None:
    """Where the slots' HF indices come from: the target, --slot-layers, data_config.json (read
    as the file's evidence decides, see `formats.layer_convention`), or nowhere."""
    if identity is not None and identity.decided_by == TARGET:
        hf = tuple(k for k in identity.hf if k is not None)
        return IdSource(TARGET, hf, HF, True, (hf,), TARGET)
    if override is not None:
        ids = tuple(int(k) for k in override)
        return IdSource(OVERRIDE, ids, HF, True, (ids,), OVERRIDE)
    if data_config is None:
        return None
    try:
        cfg = read_json(data_config)
    except InputError:
        return None
    try:
        reading = read_layer_ids(cfg, data_config)
    except InputError:
        # An unusable convention name states nothing: read the ids as if it were absent.
        try:
            reading = read_layer_ids(_without_convention(cfg), data_config)
        except InputError:
            return None
    if reading is None or any(isinstance(i, str) for i in reading.ids):
        return None
    hf = tuple(s.hf_index for s in infos if s.hf_index is not None)
    ids = tuple(int(i) for i in reading.ids)
    return IdSource(
        "data_config.json " + reading.key,
        ids,
        reading.convention,
        reading.decided,
        (hf,),
        reading.decided_by,
    )


def _label(w: Sequence[int], infos: Sequence[SlotInfo], slot_hf: Sequence[int | None]) -> str:
    """w's label with the slots named by their HF indices in `slot_hf` (as `with_layer_ids`)."""
    names = []
    for s in w:
        k = slot_hf[s]
        same = k is None or k == infos[s].hf_index
        names.append(infos[s].label if same else ("embed" if k == 0 else f"L{k}"))
    return "[" + ", ".join(names) + "]"


def layer_id_facts(
    cfg: DraftConfig,
    infos: Sequence[SlotInfo],
    n_blocks: int,
    *,
    override: Sequence[int] | None = None,
    data_config: Path | None = None,
    identity: SlotIdentity | None = None,
) -> LayerIdFacts:
    """The sources' readings as assumed and the configured wiring they select (if any)."""
    facts = LayerIdFacts(
        draft_source(cfg),
        slots_source(infos, override, data_config, identity),
        tuple(s.hf_index for s in infos),
    )
    if facts.draft is None or len(facts.draft.ids) != n_blocks:
        return facts
    if facts.draft.convention == LLAMA_CPP:  # fed as listed, not in ascending order
        hf = facts.draft.hf[0]
        w = _slots_in_order(hf, infos) if well_formed(hf) else None
        if w is not None:
            facts.configured, facts.configured_hf = w, tuple(hf)
        return facts
    for hf in facts.draft.hf:
        if not well_formed(hf):  # a repeated or negative id selects no wiring (malformed_ids)
            continue
        w = slots_for_hf(hf, infos)
        if w is not None:
            facts.configured, facts.configured_hf = w, tuple(sorted(hf))
            break
    return facts


def other_readings(
    facts: LayerIdFacts, infos: Sequence[SlotInfo], best: tuple[int, ...]
) -> list[Reading]:
    """Every other reading of the sources (a source that states its convention has none) that
    selects a wiring, each marked when it is exactly `best`."""
    draft, slots = facts.draft, facts.slots
    if draft is None:
        return []
    n_blocks = len(best)
    out: list[Reading] = []
    assumed_draft = set(draft.hf)
    draft_readings = [(c, hf_of(draft.ids, c)) for c in (HF, LAYER_OUTPUT)]
    if draft.stated:  # a GGUF's ids: llama.cpp reads them as HF indices, and only so
        draft_readings = [(draft.convention, draft.hf[0])]
    slot_readings = [(slots.convention if slots else "", facts.slot_hf)]
    if slots is not None and not slots.stated and slots.convention == LAYER_OUTPUT:
        slot_readings.append((HF, tuple(None if k is None else k - 1 for k in facts.slot_hf)))
    for d_conv, config_hf in draft_readings:
        for s_conv, slot_hf in slot_readings:
            as_assumed = config_hf in assumed_draft and slot_hf == facts.slot_hf
            if as_assumed or len(config_hf) != n_blocks or not well_formed(config_hf):
                continue
            w = slots_for_hf(config_hf, infos, slot_layers=slot_hf)
            if w is None:
                continue
            label = _label(w, infos, slot_hf)
            out.append(
                Reading(d_conv, s_conv, slot_hf, tuple(sorted(config_hf)), w, label, w == best)
            )
    return out


# --- words ---------------------------------------------------------------------------------------
CONVENTIONS = {
    HF: "HF indices",
    LAYER_OUTPUT: "decoder-layer output ids (HF index = id + 1)",
    SGLANG: f"{_SGLANG} ids (HF index = id + 1 before sglang PR #25454)",
    LLAMA_CPP: f"{_LLAMACPP}: id i = the input of target layer i = HF index i",
}


def slots_source_text(ids: LayerIdFacts) -> str:
    """Where the slots' HF indices come from, in words."""
    s = ids.slots
    if s is None:
        return "the slots' HF indices are unknown (no data_config.json beside the samples)"
    if s.where == "--slot-layers":
        return f"the slots are HF {list(ids.slot_hf)} (--slot-layers)"
    if s.where == "the target":
        return f"the slots are HF {list(ids.slot_hf)} (measured against the target)"
    how = "assumed, since the file states no convention"
    if s.stated:
        how = f"decided by its {s.decided_by}" if s.decided_by else "as the file states"
    return (
        f"the slots are HF {list(ids.slot_hf)} ({s.where} {list(s.ids)} read as "
        f"{CONVENTIONS.get(s.convention, s.convention)}, {how})"
    )


def reading_text(r: Reading, ids: LayerIdFacts) -> str:
    """Another reading of the sources and the wiring the config then selects, in words."""
    changed = []
    if r.rereads_slots:
        changed.append("data_config.json's ids as HF indices")
    if ids.draft is not None and r.config_hf not in ids.draft.hf:
        changed.append(f"the config's ids as {CONVENTIONS[r.draft_convention]}")
    tail = ", exactly the best wiring" if r.is_best else ""
    whose = (
        "the GGUF" if ids.draft is not None and ids.draft.convention == LLAMA_CPP else "the config"
    )
    return f"reading {' and '.join(changed)} instead, {whose} selects {r.label}{tail}"


def reread_fix_text(ids: LayerIdFacts) -> str:
    """The override for a reading that takes data_config.json's ids as HF indices."""
    r = next((r for r in ids.best_readings if r.rereads_slots), None)
    r = r or next((r for r in ids.readings if r.rereads_slots), None)
    if r is None:
        return ""
    flag = ""
    if all(k is not None for k in r.slot_hf):
        flag = f"pass --slot-layers {','.join(str(k) for k in r.slot_hf)} (doctor, eval, open) or "
    return (
        f"if data_config.json holds HF indices (sets captured with {_VLLM}-convention ids do), "
        f'{flag}add "index_convention": "hf" to its hidden_states'
    )
