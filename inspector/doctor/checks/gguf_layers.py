"""Check (llama.cpp GGUF drafts only): the target layers baked into the GGUF, as llama.cpp feeds
them, against the wiring the draft was trained on.

llama.cpp's converter bakes the ids into the GGUF (`eagle3.target_layers`; `eagle3.extract_layers`
in other versions), so a wrong wiring is fixed in the HF draft's config.json and by converting
again, never by a serving flag. llama.cpp reads id i as the input of target layer i (HF index i),
feeds the states in the order listed, takes exactly 3 ids (llama.cpp@0c1e57098), and on a
Llama-family target feeds nothing for an id equal to the layer count (`capture.conventions`).

Evidence: the ids and the key they are under, the HF index each id feeds (None: nothing), the
target's layer count and model_type (from --target's config.json), the recommended wiring of the
search with its HF indices, whether the two agree. Fix: the ids to write where the converter reads
them (top-level `eagle_aux_hidden_state_layer_ids`) and the command that converts again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from inspector.capture.conventions import (
    LLAMA_CPP,
)
from inspector.doctor.checks.layer_ids import CONVENTIONS
from inspector.doctor.finding import Finding, Kind, Severity
from inspector.doctor.phrasing import Text, reconvert_command
from inspector.doctor.report import DoctorReport
from inspector.draft import Draft
from inspector.engines import Engine
from inspector.engines.llamacpp_conversion import (
    IDS_PR,
    LLAMA_CPP_ID_COUNT,
    LLAMA_CPP_NO_FINAL_STATE,
    TOP_LEVEL_KEY,
    LlamaCppFeed,
    llama_cpp_feed,
)
from inspector.errors import InputError
from inspector.formats.gguf_config import LAYER_ID_KEYS
from inspector.formats.gguf_draft import read_gguf_header
from inspector.formats.layer_convention import target_layer_count, target_model_type
from inspector.metrics import Counts

# the engines' names from the registry (a rename is one edit in inspector/engines/)
_LLAMACPP, _VLLM = (
    Engine.LLAMACPP.display,
    Engine.VLLM.display,
)


@dataclass(frozen=True)
class GgufLayerFacts:
    key: str
    feed: LlamaCppFeed
    trained: tuple[int, ...]  # the recommended wiring (fc block b <- slot)
    trained_label: str
    trained_hf: tuple[int | None, ...]
    trained_counts: Counts | None
    # the wiring of the baked ids' states, where the samples hold them (llama.cpp feeds nothing
    # for those in `feed.feeds_nothing`), and its step-0 counts
    baked_label: str | None
    baked_counts: Counts | None
    fc_type: str | None  # the GGUF type of fc.weight

    @property
    def hf_known(self) -> bool:
        return all(k is not None for k in self.trained_hf)

    @property
    def agrees(self) -> bool | None:
        """Whether llama.cpp feeds the trained wiring (None: its HF indices are unknown)."""
        if not self.hf_known:
            return None
        return self.feed.hf == self.trained_hf and not self.feed.feeds_nothing

    @property
    def fix_ids(self) -> list[int] | None:
        return [int(k) for k in self.trained_hf if k is not None] if self.hf_known else None

    def to_dict(self) -> dict:
        f = self.feed
        return {
            "key": self.key,
            "ids": list(f.ids),
            "convention": LLAMA_CPP,
            "fed_hf_indices": list(f.hf),
            "num_layers": f.num_layers,
            "target_model_type": f.model_type,
            "feeds_nothing": list(f.feeds_nothing),
            "aborts": list(f.aborts),
            "final_state_unknown": list(f.final_state_unknown),
            "id_count_ok": f.count_ok,
            "trained": list(self.trained),
            "trained_label": self.trained_label,
            "trained_hf_indices": list(self.trained_hf),
            "trained_all_tok": self.trained_counts.to_dict() if self.trained_counts else None,
            "baked_label": self.baked_label,
            "baked_all_tok": self.baked_counts.to_dict() if self.baked_counts else None,
            "agrees": self.agrees,
            "fix_ids": self.fix_ids,
        }


def _header(path: str) -> tuple[str, str | None]:
    """The key the GGUF keeps its ids under, and the GGUF type of its fc.weight."""
    try:
        header = read_gguf_header(path)
    except InputError:
        return LAYER_ID_KEYS[0], None
    key = next((k for k in LAYER_ID_KEYS if k in header.keys), LAYER_ID_KEYS[0])
    return key, header.tensor_types.get("fc.weight")


def gguf_layer_facts(
    draft: Draft, report: DoctorReport, target: str | Path | None
) -> GgufLayerFacts | None:
    """The facts for a GGUF draft the doctor scored (None: not a GGUF, or nothing scored)."""
    cfg = draft.config
    if cfg.aux_layer_convention != LLAMA_CPP or not cfg.aux_layer_ids or not report.wirings:
        return None
    n, kind = (
        (None, None) if target is None else (target_layer_count(target), target_model_type(target))
    )
    feed = llama_cpp_feed(cfg.aux_layer_ids, n, kind)
    rec = report.serve_wiring
    slots = report.slots
    trained_hf = tuple(slots[s].hf_index if s < len(slots) else None for s in rec)
    best = report.wiring_result(rec)
    conf = report.configured_wiring
    baked = report.wiring_result(conf) if conf is not None else None
    key, fc_type = _header(draft.path)
    return GgufLayerFacts(
        key=key,
        feed=feed,
        trained=tuple(rec),
        trained_label=best.label if best is not None else str(list(rec)),
        trained_hf=trained_hf,
        trained_counts=best.all_tok if best is not None else None,
        baked_label=baked.label if baked is not None else None,
        baked_counts=baked.all_tok if baked is not None else None,
        fc_type=fc_type,
    )


def _severity(facts: GgufLayerFacts) -> Severity:
    f = facts.feed
    if facts.agrees is False or f.feeds_nothing or f.aborts:
        return Severity.ERROR
    if not f.count_ok or f.final_state_unknown:
        return Severity.WARNING
    return Severity.INFO


def _hf_list(hf: Sequence[int | None]) -> str:
    return "[" + ", ".join("nothing" if k is None else str(k) for k in hf) + "]"


def gguf_layers_text(facts: GgufLayerFacts, target: str | Path | None, gguf: str) -> Text:
    f = facts.feed
    L = f.num_layers
    parts = [
        f"GGUF {facts.key} {list(f.ids)} ({CONVENTIONS[LLAMA_CPP]}): {_LLAMACPP} feeds fc HF "
        f"{_hf_list(f.hf)} in that order"
    ]
    fixes: list[str] = []
    for i in f.feeds_nothing:
        parts.append(
            f"id {i} = L (the target's {L} layers) feeds nothing in {_LLAMACPP} on this "
            f"{f.model_type} target: its graph sets no final state, so the slot holds zeros "
            "(llama-server: what an earlier request left there), with no warning"
        )
    for i in f.aborts:
        parts.append(f"id {i} exceeds the target's {L} layers: {_LLAMACPP} aborts at load")
    for i in f.final_state_unknown:
        parts.append(
            f"id {i} = L asks for the final state, which {_LLAMACPP} sets only for some targets "
            f"(gpt-oss, Qwen3.5, Gemma 4; not the Llama family): model_type {f.model_type!r}"
        )
    if L is None:
        parts.append("the target's layer count is unknown (pass --target): ids past it unchecked")
    if not f.count_ok:
        parts.append(
            f"{len(f.ids)} ids: {_LLAMACPP}'s eagle3 runtime takes exactly {LLAMA_CPP_ID_COUNT} "
            "(only forks take other counts)"
        )
    trained = f"{facts.trained_label} = HF {_hf_list(facts.trained_hf)}"
    agrees = facts.agrees
    if agrees is None:
        parts.append(
            f"the draft was trained on {facts.trained_label}, whose HF indices are unknown (pass "
            "--target or --slot-layers): the baked ids are not checked against it"
        )
    elif agrees:
        parts.append(f"the wiring the draft was trained on ({trained})")
    else:
        scores = []
        if facts.trained_counts is not None:
            scores.append(facts.trained_counts.fmt())
        if facts.baked_label and facts.baked_counts is not None:
            scores.append(f"the baked ids' states {facts.baked_label}: {facts.baked_counts.fmt()}")
        scored = f" ({'; '.join(scores)})" if scores else ""
        parts.append(f"the draft was trained on {trained}{scored}")
        no_final = [k for k in facts.trained_hf if k is not None and L is not None and k >= L]
        if no_final and f.model_type in LLAMA_CPP_NO_FINAL_STATE:
            fixes.append(
                f"the trained wiring reads HF {no_final[0]}, the final state, which {_LLAMACPP} "
                f"does not feed on this target: serve the draft with {_VLLM}"
            )
        else:
            fixes.append(
                f'set "{TOP_LEVEL_KEY}": {facts.fix_ids} at the top level of the HF draft\'s '
                f"config.json (the only place {_LLAMACPP}'s converter reads them, since "
                f"{_LLAMACPP} {IDS_PR}; absent there, nested under eagle_config, or with an older "
                "converter, it writes [2, n//2, n-3]) and convert again: "
                f"{reconvert_command(target, gguf, facts.fc_type)}"
            )
    return Text("; ".join(parts), "; ".join(fixes))


def gguf_layers_finding(
    draft: Draft, report: DoctorReport, target: str | Path | None
) -> list[Finding]:
    """The finding for a llama.cpp GGUF draft ([] for any other draft)."""
    facts = gguf_layer_facts(draft, report, target)
    if facts is None:
        return []
    text = gguf_layers_text(facts, target, draft.path)
    wiring = facts.trained if facts.agrees is False else None
    return [
        Finding(Kind.GGUF_LAYERS, _severity(facts), text.summary, text.fix, facts, wiring=wiring)
    ]
