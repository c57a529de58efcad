"""Check (`doctor X.gguf --source HF_DIR`, or an HF folder with `--source X.gguf`): what llama.cpp's
converter changed between an HF EAGLE-3 draft and its GGUF.

What `convert_hf_to_gguf.py` does to a draft (`LlamaModel.__init__` and `prepare_tensors` in
llama.cpp's conversion/llama.py): it converts it as EAGLE-3 only when config.json has
`draft_vocab_size` and `num_hidden_layers` is 1; it bakes the target layers into the GGUF from the
top-level `eagle_aux_hidden_state_layer_ids` (since llama.cpp PR #25794; nested ids are not read)
or else `[2, n//2, n-3]` of the target's n layers (`capture.conventions.converter_ids`); it writes
`norm_before_residual` and `norm_before_fc` as config.json states them, false when absent, where
vLLM's reader of speculators configs takes an absent `norm_before_residual` as true; it writes d2t
as absolute ids (the loader reads them back as offsets), and rounds every weight to --outtype.

Evidence: the layer ids on both sides and which rule gave the GGUF's; every norm flag on both
sides with what each reader takes; whether d2t maps the same ids; the largest |difference| of fc
and lm_head against the source; with samples, the step-0 all-tok accuracy of each draft as served
(the HF draft under its config's ids, the GGUF as llama.cpp feeds its ids) and of the GGUF under
the HF draft's wiring (what the conversion of weights and flags alone changed).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from inspector.capture.conventions import (
    trainer_hf_indices,
)
from inspector.doctor.checks.config_variants import residual_readings
from inspector.doctor.finding import Finding, Kind, Severity
from inspector.doctor.phrasing import Text, reconvert_command
from inspector.doctor.wiring.fed_states import can_silence, silenced, silent_blocks, slots_fed
from inspector.draft import Draft
from inspector.engines import Engine
from inspector.engines.llamacpp_conversion import (
    IDS_PR,
    TOP_LEVEL_KEY,
    ConverterIds,
    LlamaCppFeed,
    converter_detects,
    converter_ids,
    llama_cpp_feed,
)
from inspector.evaluate import Evaluator
from inspector.formats.gguf_config import LAYER_ID_KEYS
from inspector.formats.gguf_draft import read_gguf_header
from inspector.formats.layer_convention import target_layer_count, target_model_type
from inspector.formats.tensorfiles import read_json
from inspector.metrics import Counts
from inspector.wiring import Wiring

# the engines' names from the registry (a rename is one edit in inspector/engines/)
_LLAMACPP, _SGLANG, _VLLM = (
    Engine.LLAMACPP.display,
    Engine.SGLANG.display,
    Engine.VLLM.display,
)

FLAGS = ("norm_before_residual", "norm_before_fc", "fc_norm", "norm_output")
# What the converter writes for each flag: the config's value (absent: false), or nothing
# (upstream's converter writes no fc_norm / norm_output; only forks do).
CONVERTER_WRITES = {"norm_before_residual": True, "norm_before_fc": True}
# canonical weight -> its GGUF tensor
COMPARED = {"fc.weight": "fc.weight", "lm_head.weight": "output.weight"}


@dataclass(frozen=True)
class FlagChange:
    """One norm flag: as the HF config.json states it (None: absent), what each reader takes from
    it, and as the GGUF states it (None: absent, which llama.cpp reads as false)."""

    flag: str
    hf_stated: bool | None
    hf_readers: dict[str, bool]
    gguf_stated: bool | None

    @property
    def gguf_value(self) -> bool:
        return bool(self.gguf_stated)

    @property
    def changed(self) -> bool:
        """The GGUF runs with another value than a reader of the HF config takes."""
        return any(v != self.gguf_value for v in self.hf_readers.values())

    def to_dict(self) -> dict:
        return {
            "flag": self.flag,
            "hf": self.hf_stated,
            "hf_readers": dict(self.hf_readers),
            "gguf": self.gguf_stated,
            "changed": self.changed,
        }


@dataclass(frozen=True)
class WeightDelta:
    name: str  # canonical
    gguf_tensor: str
    gguf_type: str | None  # None: not in the GGUF (llama.cpp takes the target's)
    max_abs_diff: float | None  # None: shapes differ, or not in the GGUF

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "gguf_tensor": self.gguf_tensor,
            "gguf_type": self.gguf_type,
            "max_abs_diff": self.max_abs_diff,
        }


@dataclass(frozen=True)
class Scored:
    """One draft under one wiring, step-0 all-tok over the samples."""

    draft: str  # "hf" | "gguf"
    how: str  # in words
    hf_indices: tuple[int | None, ...]
    all_tok: Counts

    def to_dict(self) -> dict:
        return {
            "draft": self.draft,
            "how": self.how,
            "hf_indices": list(self.hf_indices),
            "all_tok": self.all_tok.to_dict(),
        }


@dataclass
class ConversionFacts:
    gguf: str
    hf: str
    not_detected: list[str]
    ids_key: str
    gguf_ids: tuple[int, ...]
    hf_ids: tuple[int, ...] | None  # as the HF loader reads them (None: none)
    hf_convention: str | None
    hf_trained_hf: tuple[int, ...] | None  # those ids as HF indices
    converter: ConverterIds
    num_layers: int | None
    flags: list[FlagChange]
    d2t_equal: bool
    deltas: list[WeightDelta]
    feed: LlamaCppFeed
    scored: list[Scored] = field(default_factory=list)
    samples: list[int] = field(default_factory=list)
    fc_type: str | None = None  # the GGUF type of fc.weight

    @property
    def ids_rule(self) -> str:
        """Which converter rule gives the GGUF's ids: top_level, fallback, or other."""
        c = self.converter
        if c.top_level is not None and self.gguf_ids == c.top_level:
            return "top_level"
        if c.fallback is not None and self.gguf_ids == c.fallback:
            return "fallback"
        return "other" if c.fallback is not None or c.top_level is not None else "unknown"

    @property
    def ids_changed(self) -> bool:
        return self.hf_trained_hf is not None and self.gguf_ids != self.hf_trained_hf

    @property
    def changed(self) -> bool:
        return (
            bool(self.not_detected)
            or self.ids_changed
            or any(f.changed for f in self.flags)
            or not self.d2t_equal
        )

    def lines(self) -> list[str]:
        return conversion_lines(self)

    def to_dict(self) -> dict:
        c = self.converter
        return {
            "gguf": self.gguf,
            "hf": self.hf,
            "converter_detects": not self.not_detected,
            "not_detected_because": list(self.not_detected),
            "layer_ids": {
                "gguf_key": self.ids_key,
                "gguf": list(self.gguf_ids),
                "hf": list(self.hf_ids) if self.hf_ids is not None else None,
                "hf_convention": self.hf_convention,
                "hf_indices_trained": list(self.hf_trained_hf) if self.hf_trained_hf else None,
                "hf_top_level": list(c.top_level) if c.top_level is not None else None,
                "hf_nested": list(c.nested) if c.nested is not None else None,
                "converter_writes": list(c.ids) if c.ids is not None else None,
                "converter_fallback": list(c.fallback) if c.fallback is not None else None,
                "target_layers": self.num_layers,
                "gguf_ids_from": self.ids_rule,
                "changed": self.ids_changed,
            },
            "flags": [f.to_dict() for f in self.flags],
            "d2t_equal": self.d2t_equal,
            "weights": [d.to_dict() for d in self.deltas],
            "step0": [s.to_dict() for s in self.scored],
            "samples": list(self.samples),
            "changed": self.changed,
        }


# --- facts ---------------------------------------------------------------------------------------
def _flags(hf: Draft, raw: dict, gguf_keys: dict[str, object]) -> list[FlagChange]:
    out = []
    for flag in FLAGS:
        stated = raw.get(flag)
        hf_stated = stated if isinstance(stated, bool) else None
        if flag == "norm_before_residual":
            readers = residual_readings(hf.config)
            readers.pop(_SGLANG, None)  # SGLang reads no such key: the raw residual always
        else:
            readers = {"HF loader": bool(getattr(hf.config, flag))}
        if flag in CONVERTER_WRITES:
            readers[f"{_LLAMACPP} converter"] = bool(hf_stated)
        g = gguf_keys.get(f"eagle3.{flag}")
        out.append(FlagChange(flag, hf_stated, readers, g if isinstance(g, bool) else None))
    return out


def _max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float | None:
    if a.shape != b.shape:
        return None
    return float((a.detach().cpu().double() - b.detach().cpu().double()).abs().max())


def _deltas(gguf: Draft, hf: Draft, types: dict[str, str]) -> list[WeightDelta]:
    out = []
    for name, tensor in COMPARED.items():
        kind = types.get(tensor)
        diff = _max_abs_diff(gguf.weights[name], hf.weights[name]) if kind is not None else None
        out.append(WeightDelta(name, tensor, kind, diff))
    return out


def _score(ev: Evaluator, wiring: tuple[int, ...], samples: Sequence[int]) -> Counts:
    report = ev.run([Wiring(wiring)], indices=list(samples))
    return report.wirings[0].steps[0].all_tok


def _scored(
    facts: ConversionFacts, gguf: Draft, hf: Draft, ev: Evaluator, samples: Sequence[int]
) -> list[Scored]:
    ev_hf = ev if ev.draft is hf else ev.with_draft(hf)
    ev_g = ev if ev.draft is gguf else ev.with_draft(gguf)
    out: list[Scored] = []
    hf_ids = tuple(sorted(facts.hf_trained_hf)) if facts.hf_trained_hf else None
    hf_w = slots_fed(hf_ids, ev.slot_info) if hf_ids is not None else None
    if hf_w is not None and hf_ids is not None:
        how = f"the HF draft under its config's ids (HF {list(hf_ids)}, as {_VLLM} feeds them)"
        out.append(Scored("hf", how, hf_ids, _score(ev_hf, hf_w, samples)))
    feed = facts.feed
    g_w = slots_fed(feed.hf, ev.slot_info)
    nothing = silent_blocks(feed.hf)
    if g_w is not None and not feed.aborts and not (nothing and not can_silence(gguf)):
        g_ev = ev_g.with_draft(silenced(gguf, nothing)) if nothing else ev_g
        how = f"the GGUF as {_LLAMACPP} feeds its ids (HF {_hf_text(feed.hf)})"
        out.append(Scored("gguf", how, feed.hf, _score(g_ev, g_w, samples)))
    if hf_w is not None and hf_ids is not None and tuple(feed.hf) != hf_ids:
        how = f"the GGUF under the HF draft's wiring (HF {list(hf_ids)})"
        out.append(Scored("gguf", how, hf_ids, _score(ev_g, hf_w, samples)))
    return out


def conversion_facts(
    gguf: Draft,
    hf: Draft,
    *,
    target: str | Path | None = None,
    ev: Evaluator | None = None,
    samples: Sequence[int] = (),
) -> ConversionFacts:
    """What the conversion of `hf` into `gguf` changed; with an evaluator over either draft (and
    the samples to score), the step-0 accuracy of each."""
    folder = Path(hf.path)
    raw = read_json(folder / "config.json")
    header = read_gguf_header(gguf.path)
    n = target_layer_count(target) if target is not None else None
    kind = target_model_type(target) if target is not None else None
    cfg = hf.config
    hf_ids = tuple(cfg.aux_layer_ids) if cfg.aux_layer_ids else None
    trained = (
        tuple(trainer_hf_indices(hf_ids, cfg.aux_layer_convention)) if hf_ids is not None else None
    )
    gids = tuple(gguf.config.aux_layer_ids or ())
    d2t_equal = hf.vocab.d2t.shape == gguf.vocab.d2t.shape and bool(
        torch.equal(hf.vocab.d2t.cpu(), gguf.vocab.d2t.cpu())
    )
    fc_type = header.tensor_types.get("fc.weight")
    facts = ConversionFacts(
        gguf=gguf.path,
        hf=str(folder),
        not_detected=converter_detects(raw),
        ids_key=next((k for k in LAYER_ID_KEYS if k in header.keys), LAYER_ID_KEYS[0]),
        gguf_ids=gids,
        hf_ids=hf_ids,
        hf_convention=cfg.aux_layer_convention if hf_ids is not None else None,
        hf_trained_hf=trained,
        converter=converter_ids(raw, n),
        num_layers=n,
        flags=_flags(hf, raw, header.keys),
        d2t_equal=d2t_equal,
        deltas=_deltas(gguf, hf, header.tensor_types),
        feed=llama_cpp_feed(gids, n, kind),
        fc_type=fc_type,
    )
    if ev is not None and samples:
        facts.samples = list(samples)
        facts.scored = _scored(facts, gguf, hf, ev, samples)
    return facts


# --- words ---------------------------------------------------------------------------------------
def _hf_text(hf: Sequence[int | None]) -> str:
    return "[" + ", ".join("nothing" if k is None else str(k) for k in hf) + "]"


def _b(v: bool | None) -> str:
    return "absent" if v is None else str(v).lower()


def _ids_text(f: ConversionFacts) -> str:
    c = f.converter
    if c.top_level is not None:
        hf = f"top-level {TOP_LEVEL_KEY} {list(c.top_level)}"
    elif c.nested is not None:
        hf = f"eagle_config.{TOP_LEVEL_KEY} {list(c.nested)} (nested: the converter reads the top level only)"
    else:
        hf = "no layer ids"
    text = f"layer ids: HF config.json {hf} -> GGUF {f.ids_key} {list(f.gguf_ids)}"
    n = f.num_layers
    fallback = f"[2, n//2, n-3] = {list(c.fallback)} (n = {n})" if c.fallback else ""
    rule = f.ids_rule
    if rule == "top_level":
        text += f", the top-level ids as the converter writes them (since {_LLAMACPP} {IDS_PR})"
    elif rule == "fallback" and c.top_level is None:
        text += f", the converter's fallback {fallback}, which it writes without top-level ids"
    elif rule == "fallback":
        text += (
            f", the converter's fallback {fallback}: a converter before {_LLAMACPP} {IDS_PR}, "
            "which never read the config's ids"
        )
    elif rule == "other":
        alt = [f"the top-level ids {list(c.top_level)}"] if c.top_level is not None else []
        alt += [f"the fallback {fallback}"] if fallback else []
        text += f", neither {' nor '.join(alt)}: written by another tool, or edited"
    else:
        text += "; the converter's fallback [2, n//2, n-3] needs the target's n: pass --target"
    if f.ids_changed and f.hf_trained_hf is not None:
        text += (
            f"; the HF draft's ids are HF {list(f.hf_trained_hf)}, the GGUF's HF {list(f.gguf_ids)}"
        )
    return text


def _flag_text(fl: FlagChange) -> str:
    readers = ", ".join(f"{k} {_b(v)}" for k, v in fl.hf_readers.items())
    if fl.hf_stated is None:
        hf = f"absent from the HF config.json ({readers})"
    else:
        hf = f"HF {_b(fl.hf_stated)}"
    if not fl.changed:
        return f"{fl.flag} {_b(fl.hf_stated)} -> {_b(fl.gguf_stated)}"
    gguf = f"GGUF {_b(fl.gguf_stated)}" + (
        f" ({_LLAMACPP}: false)" if fl.gguf_stated is None else ""
    )
    return f"{fl.flag}: {hf} -> {gguf}"


def _shown(fl: FlagChange) -> bool:
    """A flag the converter writes, one that changed, or a fork's flag either side sets."""
    return fl.changed or fl.flag in CONVERTER_WRITES or bool(fl.hf_stated) or fl.gguf_value


def _delta_text(d: WeightDelta) -> str:
    tensor = d.name if d.gguf_tensor == d.name else f"{d.name} ({d.gguf_tensor})"
    if d.gguf_type is None:
        return f"{tensor} not in the GGUF ({_LLAMACPP} takes the target's)"
    if d.max_abs_diff is None:
        return f"{tensor} {d.gguf_type} of another shape"
    return f"{tensor} {d.gguf_type} max |d| {d.max_abs_diff:.3g}"


def conversion_lines(f: ConversionFacts) -> list[str]:
    """The finding's table, one row a line: the ids, each norm flag either side states or the
    conversion changes, d2t, the weights' rounding, and the step-0 accuracy of each scored draft."""
    rows = [_ids_text(f)]
    rows += [_flag_text(fl) for fl in f.flags if _shown(fl)]
    rows.append("d2t: the same target ids" if f.d2t_equal else "d2t maps other target ids")
    rows.append("weights against the source: " + ", ".join(_delta_text(d) for d in f.deltas))
    if f.scored:
        rows += [
            f"step-0 all-tok on {len(f.samples)} samples, {s.how}: {s.all_tok.fmt()}"
            for s in f.scored
        ]
    return rows


def _changes(f: ConversionFacts) -> list[str]:
    out = ["the layer ids"] if f.ids_changed else []
    out += [fl.flag for fl in f.flags if fl.changed]
    out += [] if f.d2t_equal else ["d2t"]
    return out


def _ids_fix(f: ConversionFacts, target: str | Path | None) -> list[str]:
    """How to bake the HF draft's ids, where the GGUF holds others."""
    if not f.ids_changed or f.hf_ids is None or f.hf_trained_hf is None:
        return []
    again = reconvert_command(target, f.gguf, f.fc_type, f.hf)
    c = f.converter
    if c.top_level is not None:
        return [
            f"convert again with {_LLAMACPP}'s converter since {IDS_PR}, which reads the "
            f"top-level ids: {again}"
        ]
    ids = list(f.hf_trained_hf)
    if ids != list(f.hf_ids) and min(f.hf_ids) >= 0:
        ids_text = (
            f"{ids} if the nested {list(f.hf_ids)} follow SpecForge's and {_SGLANG}'s id + 1, "
            f"{list(f.hf_ids)} if they are HF indices (the doctor's wiring search on samples, "
            "its gguf_layers finding, says which)"
        )
    else:
        ids_text = str(ids)
    return [
        f'set "{TOP_LEVEL_KEY}" at the top level of {f.hf}/config.json, as HF indices: '
        f"{ids_text}; then convert again: {again}"
    ]


def conversion_text(f: ConversionFacts, target: str | Path | None = None) -> Text:
    head = f"{f.hf} -> {f.gguf}: "
    fixes: list[str] = []
    if f.not_detected:
        head = (
            f"{_LLAMACPP}'s converter would not detect {f.hf} as an EAGLE-3 draft (it needs "
            f"draft_vocab_size in config.json and num_hidden_layers 1; here: "
            f"{', '.join(f.not_detected)}), so it writes no eagle3 GGUF from it; {f.gguf}: "
        )
        fixes.append(
            "convert a one-layer draft whose config.json names draft_vocab_size (a multi-layer "
            f"draft runs in {_VLLM} only)"
        )
    changes = _changes(f)
    if changes:
        summary = head + f"the conversion changed {', '.join(changes)}"
    else:
        summary = head + "the conversion changed nothing but the weights' rounding"
    fixes += _ids_fix(f, target)
    for fl in f.flags:
        if fl.changed and fl.flag in CONVERTER_WRITES and fl.hf_stated is None:
            fixes.append(
                f'write "{fl.flag}" explicitly in the HF config.json (the value the weights fit: '
                "the doctor's norm_before_residual finding) and convert again"
            )
    return Text(summary, "; ".join(fixes))


def conversion_finding(
    gguf: Draft,
    hf: Draft,
    *,
    target: str | Path | None = None,
    ev: Evaluator | None = None,
    samples: Sequence[int] = (),
) -> Finding:
    """The gguf_conversion finding (see the module docstring)."""
    facts = conversion_facts(gguf, hf, target=target, ev=ev, samples=samples)
    severity = Severity.INFO
    if facts.changed:
        severity = Severity.WARNING
    if facts.not_detected:
        severity = Severity.ERROR
    text = conversion_text(facts, target)
    return Finding(Kind.GGUF_CONVERSION, severity, text.summary, text.fix, facts)
