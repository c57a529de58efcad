"""Check: which HF hidden state each stored slot is, decided once from the evidence at hand, and
used by every other finding (labels, the configured wiring, the serving config).

Evidence, strongest first:
(a) the target, run over two samples (`target_slots`): every slot matched to the state it equals;
(b) the layer count: an id above L exists in no reading, and an id of L cannot be the output of a
    decoder layer of an L-layer target (`formats.layer_convention`);
(c) a stated convention: `--slot-layers`, data_config.json's `index_convention`, a prose field
    such as `layer_id_convention`, the writer named in the file;
(d) the draft config's ids in its layout's convention: which reading selects captured slots.
    This only corroborates: the config's ids are what the doctor checks, so they cannot decide.

When (a)-(c) decide, the finding is info (or an error for a slot that is not what the file says
it is); when nothing decides, it is a warning that states both readings, and no serving ids are
given (they would depend on the guess).

Evidence: the source of the ids, what decided (or that nothing did), both readings, the target's
matches. Fix: for a mismatch, recapture; for an undecided file, how to state the convention.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from inspector.capture.conventions import trainer_hf_indices
from inspector.doctor.checks.target_slots import POST, TargetSlots, describe
from inspector.doctor.finding import Finding, Kind, Severity
from inspector.doctor.phrasing import Text
from inspector.draft import DraftConfig
from inspector.engines import Engine
from inspector.formats.layer_convention import HF, LayerIdReading
from inspector.sample import SlotInfo

# the engines' names from the registry (a rename is one edit in inspector/engines/)
_VLLM = Engine.VLLM.display

Hf = tuple[int | None, ...]
OVERRIDE = "--slot-layers"
TARGET = "the target"  # the slots were measured against the target model


@dataclass(frozen=True)
class Mismatch:
    """A slot the target shows is not what the file says: `claimed` HF index, `actual` state
    (an HF index, POST, or None when it equals none)."""

    slot: int
    claimed: int | None
    actual: int | str | None
    verifier: bool

    def to_dict(self) -> dict:
        return {
            "slot": self.slot,
            "claimed": self.claimed,
            "actual": self.actual,
            "verifier": self.verifier,
        }


@dataclass
class SlotIdentity:
    """The slots' HF indices and what decided them.

    hf: the HF index of every slot (None: the post-norm final state, or unknown), as decided, or
      as the reader assumed when nothing decided (`decided_by` None).
    readings: every reading still possible: one when decided, two when not.
    source: where the ids come from, in words (None: no ids at all).
    """

    hf: Hf
    readings: tuple[Hf, ...]
    decided_by: str | None
    source: str | None
    num_layers: int | None = None
    file_reading: LayerIdReading | None = None
    measured: TargetSlots | None = None
    mismatches: list[Mismatch] = field(default_factory=list)
    draft_fits: list[str] = field(default_factory=list)  # readings the draft's ids select slots in
    notes: list[str] = field(default_factory=list)
    settled: str | None = None  # the convention the target showed an undecided file uses

    @property
    def decided(self) -> bool:
        return self.decided_by is not None

    @property
    def known(self) -> bool:
        return self.source is not None or self.measured_ok

    @property
    def measured_ok(self) -> bool:
        return self.measured is not None and self.measured.measured

    def to_dict(self) -> dict:
        return {
            "hf_indices": list(self.hf),
            "decided_by": self.decided_by,
            "source": self.source,
            "readings": [list(r) for r in self.readings],
            "num_layers": self.num_layers,
            "data_config": self.file_reading.to_dict() if self.file_reading else None,
            "target": self.measured.to_dict() if self.measured is not None else None,
            "mismatches": [m.to_dict() for m in self.mismatches],
            "draft_ids_fit": list(self.draft_fits),
            "notes": list(self.notes),
            "settled": self.settled,
        }


def relabel(infos: Sequence[SlotInfo], hf: Hf) -> list[SlotInfo]:
    """The slots named by `hf` ("embed", "L{k}"; None keeps a post-norm slot as it is)."""
    out = []
    for s, k in zip(infos, hf, strict=True):
        if k is None:
            out.append(s if s.post_norm else replace(s, hf_index=None))
        elif k == s.hf_index:
            out.append(s)
        else:
            out.append(replace(s, hf_index=k, label="embed" if k == 0 else f"L{k}"))
    return out


def _against(measured: TargetSlots, infos: Sequence[SlotInfo], claimed: Hf) -> list[Mismatch]:
    """The slots whose measured state is not the one `claimed` names."""
    bad: list[Mismatch] = []
    for m, info, c in zip(measured.matches, infos, claimed, strict=True):
        want: int | str | None = POST if info.post_norm else c
        if m.matched is None or (want is not None and m.matched != want):
            bad.append(Mismatch(m.slot, c, m.matched, info.verifier))
    return bad


def _measured_hf(measured: TargetSlots, claimed: Hf) -> Hf:
    """HF index per slot as measured (a post-norm slot: None; one that equals none: as claimed)."""
    out: list[int | None] = []
    for m, c in zip(measured.matches, claimed, strict=True):
        out.append(m.matched if isinstance(m.matched, int) else (None if m.matched == POST else c))
    return tuple(out)


def _draft_fits(cfg: DraftConfig, readings: dict[str, Hf], n_blocks: int) -> list[str]:
    """The readings in which the draft's ids (read as its layout's trainer writes them) name
    captured slots."""
    if not cfg.aux_layer_ids or len(cfg.aux_layer_ids) != n_blocks:
        return []
    want = set(trainer_hf_indices(cfg.aux_layer_ids, cfg.aux_layer_convention))
    return [name for name, hf in readings.items() if want <= {k for k in hf if k is not None}]


def _per_slot(hf: Sequence[int | None], infos: Sequence[SlotInfo]) -> Hf | None:
    """HF indices named by a file, one per slot: a SpecForge file names the aux slots only, and
    the post-norm final slot after them has none. None when they do not fit the slots."""
    if len(hf) == len(infos):
        return tuple(hf)
    if len(hf) == len(infos) - 1 and infos[-1].post_norm:
        return (*hf, None)
    return None


def decide(
    infos: Sequence[SlotInfo],
    cfg: DraftConfig,
    n_blocks: int,
    *,
    override: Sequence[int] | None = None,
    reading: LayerIdReading | None = None,
    measured: TargetSlots | None = None,
) -> SlotIdentity:
    """The slots' identity from the evidence (module docstring), strongest first."""
    assumed: Hf = tuple(s.hf_index for s in infos)
    L = reading.num_layers if reading is not None else None
    if measured is not None and measured.num_layers is not None:
        L = measured.num_layers
    if override is not None:
        source = f"{OVERRIDE} {list(override)}"
        claimed: Hf = tuple(int(k) for k in override)
        readings = {"stated": claimed}
        decided_by: str | None = OVERRIDE
    elif reading is not None:
        source = f"data_config.json {reading.key} {list(reading.ids)}"
        # The doctor may know more than the sample reader did (the target's layer count).
        claimed = _per_slot(reading.hf, infos) or assumed
        readings = {reading.convention: claimed}
        decided_by = reading.decided_by
        other = _per_slot(reading.other_hf, infos) if reading.other_hf is not None else None
        if other is not None:  # only an undecided file has another reading: its ids as HF
            readings[HF] = other
    else:
        source, claimed, readings, decided_by = None, assumed, {"": assumed}, None
    identity = SlotIdentity(
        claimed, tuple(readings.values()), decided_by, source, L, reading, measured
    )
    if reading is not None and reading.conflict:
        identity.notes.append(reading.conflict)
    if measured is not None and measured.measured and len(measured.matches) == len(infos):
        # Against the reading the target bears out best: an undecided file whose other reading
        # is exactly right has no mismatch, only its convention settled.
        names = sorted(readings, key=lambda r: len(_against(measured, infos, readings[r])))
        best = readings[names[0]]  # a decided identity has one reading: the claimed one
        identity.mismatches = _against(measured, infos, best)
        identity.hf = _measured_hf(measured, best)
        if decided_by is None and reading is not None and not identity.mismatches:
            identity.settled = names[0]
        identity.readings, identity.decided_by = (identity.hf,), TARGET
    if not identity.decided:
        identity.draft_fits = _draft_fits(cfg, readings, n_blocks)
    return identity


def identity_finding(identity: SlotIdentity) -> Finding | None:
    """error: a slot the target shows is not what the file says; warning: nothing decides the
    reading, or a note contradicts the file; info: the decided mapping. None: no ids to read."""
    if not identity.known and not identity.notes:
        return None
    if identity.mismatches:
        severity = Severity.ERROR
    elif not identity.decided and len(identity.readings) > 1:
        severity = Severity.WARNING
    elif identity.notes and identity.decided_by != TARGET:
        severity = Severity.WARNING
    else:
        severity = Severity.INFO
    text = slot_identity_text(identity)
    return Finding(Kind.SLOT_IDENTITY, severity, text.summary, text.fix, identity)


# --- words ---------------------------------------------------------------------------------------
READING_NAMES = {
    "hf": "HF indices",
    "layer_output": "decoder-layer output ids (the speculators v1 default, HF index = id + 1)",
}


def _state(k: int | str | None) -> str:
    if k is None:
        return "no state of this target"
    return "the post-norm final state" if k == "post-norm" else f"HF {k}"


def _mismatch(m: Mismatch, n_layers: int | None) -> Text:
    stored = f"slot {m.slot} is stored as {_state(m.claimed)}"
    if m.verifier:
        stored += " (the verifier's last state, the teacher's source)"
    if m.actual is None:
        return Text(
            f"{stored} but equals {_state(None)}: captured from another layer convention, another "
            "model revision, or a quantized or rotated target",
            "capture the samples from the deployed target (eagle-inspect capture), or pass the "
            "target the samples were captured from",
        )
    fix = f"recapture slot {m.slot} from {_state(m.claimed)}"
    if m.verifier and n_layers is not None and m.claimed == n_layers:
        fix += (
            f" (the last layer's output before the final norm: {_VLLM} id {n_layers}, not "
            f"{n_layers - 1}; the off-by-one of TorchSpec#87)"
        )
    return Text(f"{stored} but equals {_state(m.actual)}", fix)


def _names(hf) -> str:
    """[1, 3, 5, post-norm]: a slot without an HF index is the post-norm final state."""
    return "[" + ", ".join("post-norm" if k is None else str(k) for k in hf) + "]"


def slot_identity_text(identity: SlotIdentity) -> Text:
    """The slots' identity: measured, decided by the files, or two readings and no decision."""
    measured = identity.measured
    src = identity.source or "the samples"
    if identity.mismatches:
        parts = [_mismatch(m, identity.num_layers) for m in identity.mismatches]
        summary = (
            f"the target contradicts {src}: "
            + "; ".join(p.summary for p in parts)
            + ". Every score on this slot is of another state than the file names"
        )
        return Text(summary, "; ".join(dict.fromkeys(p.fix for p in parts)))
    hf = [("post-norm" if k is None else k) for k in identity.hf]
    if identity.decided_by == "the target":
        matches = ", ".join(describe(m) for m in measured.matches)
        agrees = f"{src} as read agrees"
        if identity.settled is not None:
            agrees = f"so {src} holds {READING_NAMES[identity.settled].split(' (')[0]}"
        return Text(
            f"slots measured against the target ({identity.num_layers} layers, samples "
            f"{list(measured.samples)}): {matches}; {agrees}"
        )
    tail = ""
    if measured is not None and measured.skipped:
        tail = f"; the target was not run ({measured.skipped})"
    notes = "".join("; " + n for n in identity.notes)
    if identity.decided:
        r = identity.file_reading
        how = identity.decided_by
        if r is not None and how == "layer count":
            how = f"the layer count ({r.num_layers} layers, {r.layers_from})"
        elif how not in ("--slot-layers",):
            how = f"its {how}"
        return Text(f"the slots are HF {hf}: {src}, decided by {how}{notes}{tail}")
    r = identity.file_reading
    assert r is not None
    if len(identity.readings) == 1:  # the ids fit the slots in the reader's reading only
        return Text(
            f"the slots are HF {_names(identity.hf)} as the reader assumed: {src} read as "
            f"{READING_NAMES[r.convention]}, the file states no convention{tail}"
        )
    readings = "; ".join(
        f"read as {READING_NAMES[conv]} the slots are HF {_names(h)}"
        for conv, h in (
            (r.convention, identity.readings[0]),
            ("hf" if r.convention != "hf" else "layer_output", identity.readings[-1]),
        )
    )
    fits = ""
    if identity.draft_fits:
        names = " or ".join(READING_NAMES[f].split(" (")[0] for f in identity.draft_fits)
        fits = (
            f"; the draft's configured ids name captured slots when they are read as {names} "
            "(not decisive: those ids are what the doctor checks)"
        )
    return Text(
        f"{src} states no convention and nothing decides it: {readings}{fits}{tail}. The "
        "serving config gives no ids until it is decided",
        "pass --target DIR (the doctor then matches every slot to the state it equals), or state "
        'it: "index_convention": "hf" (or "speculators") in data_config.json\'s hidden_states, '
        "the target's num_hidden_layers there, or --slot-layers",
    )
