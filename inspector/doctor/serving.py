"""Serving-engine settings that feed a given wiring, and the serving_config finding.

Engines capture the configured layers and concatenate them in ascending layer order, so a wiring
is reproducible only when its slots' HF indices ascend along the fc blocks.

Index conventions (HF index k = `output_hidden_states[k]`, 0 = embedding output):
- vLLM `eagle_aux_hidden_state_layer_ids`: k. Id 0 (embedding) and id L (last layer, pre-norm)
  need the `EagleModelMixin` capture (vLLM PR #36063); the older capture crashes on 0 and never
  reaches L.
- SGLang `eagle_config.eagle_aux_hidden_state_layer_ids`: the target's model file decides
  (`engines.sglang_model_files`): SGLang 0.5.23's llama.py and most others add 1 to every explicit id
  (write k - 1; -1 = embedding; srt/models/llama.py); deepseek_v2.py adds 1 only when
  the first id is 1 (3458-3473): other lists are read as HF indices, and a first HF index of 1
  cannot be written at all. For a target class the table does not know, the ids of both
  readings are given.
- SGLang captures at the input of layer i, so the last layer's output (HF index L) is reached
  only where the model file captures after its layer loop (gpt-oss, gpt_oss.py).

Evidence of the finding: the `ServingConfig` itself (its JSON form is the report's
`serving_config`). Fix: the config.json keys for both engines.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from inspector.doctor.finding import Finding, Kind, Severity
from inspector.doctor.phrasing import WRITE_FIXED, Text
from inspector.engines import Engine, engine
from inspector.engines.sglang import LABEL as SGLANG_LABEL
from inspector.engines.sglang_model_files import (
    EVERY,
    READING_EXAMPLES,
    READINGS,
    RULE_WORDS,
    SglangIdRule,
    ids_for,
    sglang_rule,
)
from inspector.engines.target_class import target_class
from inspector.engines.vllm import MIXIN_PR as VLLM_MIXIN_PR
from inspector.sample import SlotInfo

# the engines' names from the registry (a rename is one edit in inspector/engines/)
_SGLANG, _VLLM = (
    Engine.SGLANG.display,
    Engine.VLLM.display,
)

VLLM_PR = VLLM_MIXIN_PR


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


@dataclass(frozen=True)
class EngineConfig:
    """One engine's settings: the config.json keys, the launch line, and notes; `caveats` are
    the notes that state a condition the engine must meet (the finding repeats them)."""

    config: dict
    launch: str
    notes: list[str]
    caveats: list[str]

    def to_dict(self) -> dict:
        return {
            "config": self.config,
            "launch": self.launch,
            "notes": list(self.notes),
            "caveats": list(self.caveats),
        }


@dataclass(frozen=True)
class SglangConfig(EngineConfig):
    """SGLang's settings for the target's class (`target`: its name; None: not known).

    rule: the class's row of `engines.sglang_model_files.SGLANG_ID_RULES` (None: a class it does not
      know); layer_ids: the ids to write, by that rule (None: no list selects the HF indices;
      for an unknown class, None where the readings differ); by_rule: the ids each reading
      needs (the class's rule alone when it is known, else every one of `READINGS`)."""

    target: str | None = None
    rule: SglangIdRule | None = None
    layer_ids: list[int] | None = None
    by_rule: dict[str, list[int] | None] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "config": self.config,
            "target_class": self.target,
            "rule": self.rule.to_dict() if self.rule is not None else None,
            "layer_ids": None if self.layer_ids is None else list(self.layer_ids),
            "layer_ids_by_rule": {k: v if v is None else list(v) for k, v in self.by_rule.items()},
            "launch": self.launch,
            "notes": list(self.notes),
            "caveats": list(self.caveats),
        }

    @property
    def text(self) -> str:
        """The ids in words, e.g. 'eagle_config ids [-1, 1, 3] for SGLang 0.5.23 (Llama: SGLang
        adds 1 to every id)'."""
        return sglang_ids_text(self.to_dict())


def sglang_ids_text(sg: dict) -> str:
    """The words for SGLang's ids, from the JSON form of a `SglangConfig`."""
    engine = SGLANG_LABEL
    ids, rule = sg.get("layer_ids"), sg.get("rule")
    if rule is not None:
        how = f"{rule['family']}: {rule['words']}"
        if ids is None:
            return f"no eagle_config ids for {engine} ({how})"
        return f"eagle_config ids {ids} for {engine} ({how})"
    cls = (
        f"{sg['target_class']}, a class the table of model files does not know"
        if sg.get("target_class")
        else "target class unknown"
    )
    if ids is not None:
        return f"eagle_config ids {ids} for {engine} (every reading; {cls})"
    by = sg.get("layer_ids_by_rule") or {}
    readings = ", ".join(
        f"{'none' if by.get(r) is None else by[r]} where it "
        f"{RULE_WORDS[r].removeprefix(_SGLANG + ' ')} ({READING_EXAMPLES[r]})"
        for r in READINGS
    )
    return f"eagle_config ids for {engine} by the target's model file ({cls}): {readings}"


@dataclass(frozen=True)
class EngineConfigs:
    sglang: SglangConfig
    vllm: EngineConfig

    @property
    def vllm_ids(self) -> list[int]:
        return list(self.vllm.config["eagle_aux_hidden_state_layer_ids"])

    @property
    def caveats(self) -> list[str]:
        return [*self.sglang.caveats, *self.vllm.caveats]

    def to_dict(self) -> dict:
        return {Engine.SGLANG.value: self.sglang.to_dict(), Engine.VLLM.value: self.vllm.to_dict()}


def engine_configs(
    hf: Sequence[int], *, last_layer: int | None, n_tokens: int = 3, target: object = None
) -> dict:
    """The JSON form of `engine_settings` (what `reconcile` quotes)."""
    return engine_settings(hf, last_layer=last_layer, n_tokens=n_tokens, target=target).to_dict()


def sglang_settings(
    hf: Sequence[int], target: object = None
) -> tuple[str | None, SglangIdRule | None, list[int] | None, dict[str, list[int] | None]]:
    """(class name, its rule, the ids to write, the ids per reading) for HF indices `hf`
    (ascending) on a target of class `target` (see `engines.target_class.target_class`)."""
    cls = target_class(target)
    rule = sglang_rule(cls)
    if rule is not None:
        ids = rule.ids_for(hf)
        return cls.name if cls else None, rule, ids, {rule.rule: ids}
    by = {r: ids_for(r, hf) for r in READINGS}
    first = by[READINGS[0]]
    same = all(v == first for v in by.values())
    return cls.name if cls else None, None, first if same else None, by


def engine_settings(
    hf: Sequence[int], *, last_layer: int | None, n_tokens: int = 3, target: object = None
) -> EngineConfigs:
    """config.json keys + launch lines for SGLang and vLLM that capture the HF indices `hf`.

    target: the target's class (what `engines.target_class.target_class` reads: a TargetClass,
    its config, an architecture or model_type name): SGLang's ids follow its model file; None or
    a class the table does not know gives the ids of every reading."""
    hf = sorted(hf)
    name, rule, ids, by = sglang_settings(hf, target)
    # (note, caveat): a caveat is a condition the engine must meet, which the finding repeats.
    sg_notes: list[tuple[str, bool]] = [
        (Engine.SGLANG.says("reads_ids"), False),
        (
            "use --speculative-algorithm EAGLE3: under EAGLE an EAGLE-3 draft gets one state and "
            "fc is skipped (sglang PR #21272)",
            False,
        ),
    ]
    if rule is not None:
        where = f"{SGLANG_LABEL} {rule.source}"
        if ids is None:
            sg_notes.append(
                (
                    f"target {name}: no id list selects HF indices {hf} ({rule.words}, {where})",
                    True,
                )
            )
        else:
            sg_notes.append((f"target {name}: {rule.words} ({where}): write {ids}", False))
    else:
        cls = f"target {name}, a class" if name else "a target class"
        readings = "; ".join(
            f"{RULE_WORDS[r]}: {'no id list selects them' if by[r] is None else by[r]}"
            for r in READINGS
        )
        sg_notes.append(
            (
                f"{cls} {SGLANG_LABEL}'s table of model files does not know: the ids "
                f"for HF indices {hf} depend on its set_eagle3_layers_to_capture ({readings})",
                ids is None,
            )
        )
    vl_notes = [(Engine.VLLM.says("reads_ids"), False)]
    written = ids if ids is not None else (by.get(EVERY) if rule is None else None)
    if 0 in hf and written is not None:
        sg_notes.append(
            (
                f"id {written[0]} (the embedding) is captured at layer 0's input by "
                f"{SGLANG_LABEL}'s layer boundary; an older model file capturing "
                "`hidden_states + residual` without a `residual is None` guard raises there",
                True,
            )
        )
    if 0 in hf:
        vl_notes.append(
            (f"id 0 (the embedding) needs the EagleModelMixin capture ({VLLM_PR})", True)
        )
    if last_layer is not None and last_layer in hf:
        if rule is None or not rule.captures_last:
            sg_notes.append(
                (
                    f"HF index {last_layer} is the last layer's output, captured after the layer "
                    f"loop: {_SGLANG}'s capture at the input of layer i reaches it only where the "
                    "model file captures after its loop (gpt-oss does)",
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
    cls = target_class(target)
    if last_layer is not None and last_layer in hf and cls is not None:
        # dated facts of the vLLM line about the last layer's output on this target's class
        for fact in engine(Engine.VLLM).facts_for(cls.model_type, "eagle3"):
            if fact.last_id and fact.applies_to:
                vl_notes.append((f"{cls.name}: {fact.words} ({_VLLM} {fact.since})", True))
    config = (
        {
            "eagle_config": {
                "eagle_aux_hidden_state_layer_ids": written,
                "use_aux_hidden_state": True,
            }
        }
        if written is not None
        else {}
    )
    return EngineConfigs(
        sglang=SglangConfig(
            config=config,
            launch=engine(Engine.SGLANG).launch(n_tokens),
            notes=[n for n, _ in sg_notes],
            caveats=[n for n, c in sg_notes if c],
            target=name,
            rule=rule,
            layer_ids=ids,
            by_rule=by,
        ),
        vllm=EngineConfig(
            config={"eagle_aux_hidden_state_layer_ids": list(hf)},
            launch=engine(Engine.VLLM).launch(n_tokens),
            notes=[n for n, _ in vl_notes],
            caveats=[n for n, c in vl_notes if c],
        ),
    )


@dataclass(frozen=True)
class ServingConfig:
    """The serving settings for one wiring (the report's `serving_config`).

    hf_indices: the wired slots' HF indices in fc block order (None where unknown).
    ascending: whether they ascend (None: unknown or undecided), so an engine's capture order
      feeds the wiring; reproducible: an engine can feed exactly this wiring.
    undecided: the wiring's HF indices under each reading nothing decides between (see
      `slot_identity`); no engine ids are given then, since every id would be a guess.
    engines: the SGLang and vLLM settings (None without known, decided HF indices); for a
      wiring that is not ascending, those of the checkpoint `--write-fixed` writes
      (`configs_for` says so).
    """

    wiring: tuple[int, ...]
    hf_indices: tuple[int | None, ...]
    ascending: bool | None = None
    reproducible: bool | None = None
    problems: tuple[str, ...] = ()
    undecided: tuple[tuple[int | None, ...], ...] | None = None
    engines: EngineConfigs | None = None
    configs_for: str | None = None

    def to_dict(self) -> dict:
        """The JSON the report has always written (key order included)."""
        out: dict = {
            "wiring": list(self.wiring),
            "hf_indices": list(self.hf_indices),
            "ascending": self.ascending,
            "reproducible": self.reproducible,
        }
        if self.undecided is not None:
            out["undecided"] = [list(r) for r in self.undecided]
        out["problems"] = list(self.problems)
        if self.engines is not None:
            out.update(self.engines.to_dict())
        if self.configs_for is not None:
            out["configs_for"] = self.configs_for
        return out


def serving_config(
    wiring: Sequence[int],
    infos: Sequence[SlotInfo],
    *,
    slot_layers: Sequence[int] | None = None,
    n_tokens: int = 3,
    readings: Sequence[Sequence[int | None]] | None = None,
    target: object = None,
) -> ServingConfig:
    """The serving settings for `wiring` (see `ServingConfig`).

    readings: the slots' HF indices under each reading nothing decides between (see
    `slot_identity`); with more than one, no engine ids are given.
    target: the target's class, for SGLang's ids (see `engine_settings`).
    """
    hf = hf_indices(wiring, infos, slot_layers)
    wiring = tuple(wiring)
    if readings is not None and len(readings) > 1:
        undecided = tuple(tuple(r[s] for s in wiring) for r in readings)
        return ServingConfig(
            wiring,
            (None,) * len(hf),
            undecided=undecided,
            problems=(
                "the slots' HF indices depend on the convention of data_config.json's layer ids, "
                "which nothing decides: the wiring is HF "
                + " or HF ".join(str(list(u)) for u in undecided)
                + ", so any engine id would be a guess",
            ),
        )
    post = [s for s in wiring if s < len(infos) and infos[s].post_norm]
    last_layer = None
    for i, info in enumerate(infos):  # the verifier's last pre-norm state is HF index L
        if info.verifier and not info.post_norm:
            last_layer = (
                slot_layers[i]
                if slot_layers is not None and i < len(slot_layers)
                else info.hf_index
            )
    if any(k is None for k in hf):
        return ServingConfig(
            wiring,
            tuple(hf),
            problems=(
                "the slots' HF indices are unknown: pass --slot-layers, or keep data_config.json "
                "beside the samples",
            ),
        )
    known = [k for k in hf if k is not None]
    ascending = all(a < b for a, b in zip(known, known[1:], strict=False))
    problems: list[str] = []
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
    return ServingConfig(
        wiring,
        tuple(hf),
        ascending=ascending,
        reproducible=ascending and not post,
        problems=tuple(problems),
        engines=engine_settings(known, last_layer=last_layer, n_tokens=n_tokens, target=target),
        configs_for=None if ascending else "the --write-fixed checkpoint",
    )


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


def serving_finding(
    cfg: ServingConfig, wiring: tuple[int, ...], label: str, *, slots_reread: bool = False
) -> Finding:
    """How to configure the engines for the recommended `wiring` (named `label`): an error when
    none can feed it.

    slots_reread: another reading of data_config.json's layer ids matters (see `layer_ids`), so
    the ids given depend on the convention assumed for it."""
    caveats: list[str] = []
    fed = None
    if cfg.ascending is None:
        severity = Severity.WARNING  # unknown or undecided HF indices: no engine ids
    elif not cfg.ascending:
        severity = Severity.ERROR
    else:
        assert cfg.engines is not None  # known, ascending HF indices have engine settings
        caveats = cfg.engines.caveats
        # Caveats are conditions on the engine's version (which the summary states), not faults
        # of this draft or config: info, so a correctly configured draft gets no warning.
        severity = Severity.ERROR if cfg.problems else Severity.INFO
        fed = wiring
    text = serving_text(cfg, label, caveats, slots_reread)
    return Finding(Kind.SERVING_CONFIG, severity, text.summary, text.fix, cfg, wiring=fed)


# --- words ---------------------------------------------------------------------------------------
def serving_text(
    cfg: ServingConfig, best_label: str, caveats: Sequence[str], slots_reread: bool
) -> Text:
    problems = cfg.problems
    if cfg.undecided:
        return Text(
            "serving config: no engine ids: " + "; ".join(problems),
            "decide the slots' identity first (see the slot_identity finding): pass --target DIR, "
            "state the convention in data_config.json, or pass --slot-layers",
        )
    if cfg.ascending is None or cfg.engines is None:
        return Text("serving config: " + "; ".join(problems), "pass --slot-layers HF,IDS,...")
    vllm = cfg.engines.vllm_ids
    sglang = cfg.engines.sglang
    lines = f"{_VLLM} eagle_aux_hidden_state_layer_ids {vllm}; {sglang.text}"
    eagle = sglang.config.get("eagle_config")
    keys = f'config.json: "eagle_aux_hidden_state_layer_ids": {vllm} ({_VLLM})'
    if eagle is not None:
        sg = eagle["eagle_aux_hidden_state_layer_ids"]
        keys += (
            f' and "eagle_config": {{"eagle_aux_hidden_state_layer_ids": {sg}, '
            f'"use_aux_hidden_state": true}} ({_SGLANG}'
            + (")" if sglang.layer_ids is not None else ", where it adds 1 to every id)")
        )
    if not cfg.ascending:
        return Text(
            f"no engine config reproduces {best_label}: "
            + "; ".join(problems)
            + f". After --write-fixed: {lines}",
            f"{WRITE_FIXED}, then serve OUT with {keys}",
        )
    summary = f"to feed {best_label}: {lines}"
    if problems or caveats:
        summary += "; " + "; ".join(problems or caveats)
    if slots_reread:
        summary += (
            "; these ids take data_config.json's layer ids as decoder-layer outputs (see the "
            "wiring finding for the other reading)"
        )
    return Text(summary, keys)
