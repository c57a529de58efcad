"""What each serving engine will read from a draft's config, and so the layers it will feed.

A draft's ids now live in several places (the top-level `eagle_aux_hidden_state_layer_ids`,
`eagle_config.eagle_aux_hidden_state_layer_ids`, `target_layer_ids`), and each engine looks in
its own: a reader that looks elsewhere finds nothing and silently falls back to a default triple.
The norm flags likewise (`norm_before_residual` defaults to true in vLLM's speculators reader,
false in its plain reader and in llama.cpp's converter, and SGLang reads it nowhere). The draft
then runs on other layers, or other norms, than it was trained with, and nothing errors.

`READERS` is one row per engine release and reading path, each held in that engine's module
(`inspector.engines`) with the files of that release it was read from; `engine_reads` applies
them to a config. Pure: no torch, no files. SGLang's per-target-class index rule is
`engines.sglang_model_files`'s table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from inspector.engines import Engine, engine, readers
from inspector.engines.reading import (
    DFLASH_IDS,
    NESTED,
    NESTED_LAYER_IDS,
    NEVER,
    SGLANG_MODEL_FILE,
    SPECULATORS_TRUE,
    TARGET_IDS,
    TOP,
    Reader,
)
from inspector.engines.sglang_model_files import READINGS, UNLESS_LAST, captured, sglang_rule

# the engines' names from the registry (a rename is one edit in inspector/engines/)
_SGLANG = Engine.SGLANG.display

READERS: tuple[Reader, ...] = readers()
__all__ = ["NEVER", "READERS", "Reader", "EngineRead", "engine_reads"]


@dataclass(frozen=True)
class EngineRead:
    """What one reader makes of one config: the ids it finds (where), the HF indices it feeds
    (ascending, each once: engines capture in layer order), and why it cannot serve the draft
    (None: it can). `readings`: SGLang on an unknown target class, one HF list per rule."""

    reader: Reader
    where: str | None  # the key it found the ids under; None: its default
    ids: tuple[int, ...] | None
    hf: tuple[int, ...] | None  # None: several readings (`readings`) or none it can serve
    readings: tuple[tuple[int, ...], ...] = ()
    problem: str | None = None
    norms: tuple[tuple[str, bool, str], ...] = ()  # (flag, value it runs with, how it got it)
    notes: tuple[str, ...] = ()
    # the reader does not load this config's layout at all (SGLang and a speculators config):
    # the draft must be rewritten for it first, which is then what it reads
    unsupported: str | None = None
    # what reaches the fc blocks, in block order: an HF index, or None where the engine feeds
    # nothing (llama.cpp's id L on a Llama-family target: zeros, or stale bytes); None when it
    # cannot serve the draft for another reason, or the reading is not one
    fed: tuple[int | None, ...] | None = None

    def to_dict(self) -> dict:
        return {
            "engine": self.reader.engine,
            "version": self.reader.version,
            "path": self.reader.path,
            "label": self.reader.label,
            "reads": self.where,
            "ids": list(self.ids) if self.ids is not None else None,
            "hf_indices": list(self.hf) if self.hf is not None else None,
            "readings": [list(r) for r in self.readings],
            "problem": self.problem,
            "norms": {k: {"value": v, "how": how} for k, v, how in self.norms},
            "notes": list(self.notes),
            "unsupported": self.unsupported,
            "fed": list(self.fed) if self.fed is not None else None,
            "source": self.reader.source,
        }


def lookup(config: Mapping, key: str) -> object:
    """`a.b` reads config[a][b]; None where absent or not a mapping on the way."""
    node: object = config
    for part in key.split("."):
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return node


def _ids(value: object) -> tuple[int, ...] | None:
    if isinstance(value, list | tuple) and value and all(isinstance(i, int) for i in value):
        return tuple(int(i) for i in value)
    return None


def default_hf(num_layers: int) -> tuple[int, ...]:
    L = num_layers
    return (2, L // 2, L - 3)


def engine_reads(
    config: Mapping,
    num_layers: int,
    n_blocks: int,
    *,
    target: object = None,
    gguf: bool = False,
    readers: Sequence[Reader] = READERS,
    draft: str = "eagle3",
) -> list[EngineRead]:
    """Each reader's reading of `config` (the draft's config.json as parsed, or, `gguf`, the
    GGUF's metadata with `eagle3.target_layers`) for a target of `num_layers` layers and a
    draft whose fc takes `n_blocks` states. `target`: the target's class where known (its
    config.json, architectures or model_type), for SGLang's rule. `draft`: the kind of draft
    ("eagle3", or a block drafter's "dflash2" / "dspark"): a reader reads only its kinds."""
    out = []
    for r in readers:
        if r.gguf != gguf or draft not in r.drafts:
            continue
        out.append(_read(r, config, num_layers, n_blocks, target))
    return out


def _read(r: Reader, config: Mapping, L: int, n_blocks: int, target: object) -> EngineRead:
    if not r.reads_speculators and "speculators_config" in config:
        return EngineRead(
            r,
            None,
            None,
            None,
            unsupported=(
                "does not load the speculators layout: rewrite the config in its own "
                "(architectures LlamaForCausalLMEagle3, the ids under eagle_config; the "
                "serving_config finding gives them)"
            ),
        )
    where, ids, shift = None, None, None
    never_last = False
    for key, s in r.keys:
        found = _ids(lookup(config, key))
        if found is not None:
            where, ids, shift = key, found, s
            break
    notes: list[str] = []
    readings: tuple[tuple[int, ...], ...] = ()
    draft_layers = config.get("num_hidden_layers")
    if ids is None and r.guess_ids is not None and isinstance(draft_layers, int):
        # a block drafter's guess (SGLang's copy of the reference's spread), shifted as its ids
        guessed = r.guess_ids(L, draft_layers)
        ids, shift = tuple(guessed), r.keys[0][1]
        notes.append(
            f"no ids where it looks ({', '.join(k for k, _ in r.keys)}): its guess {guessed} "
            f"for {L} target layers and {draft_layers} draft layers"
        )
    if ids is None and r.no_ids is not None:
        return EngineRead(r, None, None, None, problem=r.no_ids)
    if ids is None:
        hf_list: list[int] | None = list(default_hf(L))
        where_words = f"no ids where it looks ({', '.join(k for k, _ in r.keys)})"
        notes.append(f"{where_words}: its default [2, L//2, L-3] = {hf_list}")
    elif shift == SGLANG_MODEL_FILE:
        rule = sglang_rule(target)
        if rule is not None:
            hf_list = rule.captured(ids, L)
            notes.append(f"{rule.family}: {rule.words}")
            never_last = rule.rule != UNLESS_LAST  # gpt_oss.py alone captures the last output
        else:
            readings = tuple(
                tuple(sorted(set(h)))
                for h in (captured(rule_name, ids, L) for rule_name in READINGS)
                if h is not None
            )
            hf_list = list(readings[0]) if len(set(readings)) == 1 else None
            if hf_list is None:
                notes.append(
                    "target class unknown: its model file decides (+1 to every id, as Llama's, "
                    "or only when the first id is 1, as DeepSeek-V2/V3's)"
                )
    else:
        assert isinstance(shift, int)
        hf_list = [i + shift for i in ids]
    problem = None
    hf: tuple[int, ...] | None = None
    fed_order: tuple[int | None, ...] | None = None
    if hf_list is not None:
        fed = sorted(set(hf_list))
        # what reaches the fc: llama.cpp reads each listed id's state, a repeat included;
        # the others capture each layer once
        width = len(hf_list) if r.as_listed else len(fed)
        if len(fed) < len(hf_list):
            notes.append(
                f"ids {hf_list} repeat a layer: {engine(r.engine).display} feeds it to "
                f"{len(hf_list) - len(fed) + 1} fc blocks"
                if r.as_listed
                else f"ids {sorted(hf_list)} repeat a layer: it is captured once"
            )
        negative = [k for k in fed if k < 0]
        if negative:
            held = [k for k in fed if 0 <= k <= L]
            notes.append(_negative_note(r, negative, held, L, n_blocks))
        bad = [k for k in fed if k < 0 or k > L]
        untapped = [k for k in fed if k < r.first_tap or (k == L and not r.taps_last)]
        if bad:
            problem = f"HF {bad} outside 0..{L}: no such state"
        elif untapped:
            last = L if r.taps_last else L - 1
            problem = (
                f"HF {untapped} cannot be fed: {r.taps}, for {r.first_tap} <= i <= {last} only"
            )
        elif never_last and L in fed and hf_list is not None:
            n = len([k for k in fed if k != L])
            problem = (
                f"HF {L} (the last layer's output) is never captured: {_SGLANG}'s model file "
                f"captures the input of layers 0..{L - 1}, so {n} state{'' if n == 1 else 's'} "
                f"reach an fc that takes {n_blocks} (a shape error at the first request)"
            )
        elif r.last_feeds_nothing and L in fed:
            problem = (
                f"id {L} (the last layer's output) feeds nothing: {r.taps}, and there is no "
                f"layer {L} (zeros or stale bytes, no warning)"
            )
            if width == n_blocks:
                fed_order = tuple(None if k == L else k for k in hf_list)
        elif width != n_blocks:
            problem = (
                f"{width} state{'' if width == 1 else 's'} for an fc that takes {n_blocks}: "
                "it cannot serve it"
            )
        hf = tuple(fed)
        if problem is None:
            fed_order = tuple(hf_list) if r.as_listed else hf
    norms = tuple(_norm(config, flag, default, how) for flag, how, default in r.norms)
    return EngineRead(r, where, ids, hf, readings, problem, norms, tuple(notes), fed=fed_order)


def _negative_note(
    r: Reader, negative: Sequence[int], held: Sequence[int], L: int, n_blocks: int
) -> str:
    """What a reader does with an id below 0. vLLM 0.32 and SGLang capture a layer when its
    index is in the set of ids (vllm/model_executor/models/interfaces.py: `layer_idx in
    self.aux_hidden_state_layers`, indices 0..L): a negative id matches none, no Python negative
    indexing. llama.cpp taps the input of layer i: there is no layer below 0."""
    ids = f"id {negative[0]}" if len(negative) == 1 else f"ids {list(negative)}"
    if r.as_listed:
        return f"{ids}: {r.taps}, and there is no such layer"
    n = len(held)
    return (
        f"{ids} match{'es' if len(negative) == 1 else ''} no layer: it captures a layer whose "
        f"index (0..{L}) is among the ids, with no negative indexing, so {n} state"
        f"{'' if n == 1 else 's'} (HF {list(held)}) reach an fc that takes {n_blocks} "
        "(a shape error when the draft first runs)"
    )


def _norm(config: Mapping, flag: str, default: bool, how: str) -> tuple[str, bool, str]:
    if how == NEVER:
        return flag, default, NEVER
    for key in (flag, f"eagle_config.{flag}", f"eagle3.{flag}"):
        v = lookup(config, key)
        if isinstance(v, bool):
            return flag, v, key
    if how == SPECULATORS_TRUE:
        default = "speculators_config" in config
        how = "speculators config" if default else "plain config"
    return flag, default, f"absent: its default {str(default).lower()} ({how})"


def fed_candidates(
    config: Mapping,
    num_layers: int,
    n_blocks: int,
    configured_hf: Sequence[int] | None,
    *,
    target: object = None,
    gguf: bool = False,
) -> list[tuple[str, tuple[int | None, ...]]]:
    """The wirings that an engine may be feeding this draft, as the HF indices reaching fc
    blocks 0..N-1 (None: a block fed nothing, llama.cpp's id L): what each reader makes of the
    config (`engine_reads`, in the order each feeds them), and the configured ids read one off
    either way (the conventions differ by one: SGLang's +1, a converter that copies HF indices
    into eagle_config). Each once, in that order, only those an fc of `n_blocks` takes."""
    out: dict[tuple[int | None, ...], str] = {}
    for r in engine_reads(config, num_layers, n_blocks, target=target, gguf=gguf):
        if r.fed is not None and not r.unsupported:
            out.setdefault(r.fed, f"{r.reader.label} feeds")
    if configured_hf:
        for shift in (1, -1):
            hf = tuple(sorted({k + shift for k in configured_hf}))
            if len(hf) == n_blocks and all(0 <= k <= num_layers for k in hf):
                out.setdefault(hf, f"ids {'+' if shift > 0 else '-'}1")
    return [(name, hf) for hf, name in out.items()]


# Every place a config writes layer ids, and what its writers mean by them as HF indices: the
# top level and eagle_config.layer_ids are HF indices (speculators, vLLM); eagle_config's
# eagle_aux_hidden_state_layer_ids are the output of layer i (SpecForge, SGLang's Llama rule),
# target_layer_ids the same (DFlash, DSpark; vLLM adds 1 to them).
ID_PLACES = (
    (TOP, 0),
    (NESTED, 1),
    (TARGET_IDS, 1),
    (DFLASH_IDS, 1),
    (NESTED_LAYER_IDS, 0),
)


def id_places(config: Mapping) -> list[tuple[str, tuple[int, ...], tuple[int, ...]]]:
    """Every place the config writes layer ids: (key, ids as written, HF indices as its writers
    mean them). Readers that look in different places feed different layers where the HF
    indices disagree."""
    out = []
    for key, shift in ID_PLACES:
        ids = _ids(lookup(config, key))
        if ids is not None:
            out.append((key, ids, tuple(sorted({i + shift for i in ids}))))
    return out


def reader_norms(reader: Reader, config: Mapping) -> tuple[tuple[str, bool, str], ...]:
    """The norm flags `reader` runs a draft with, from `config` (the draft's config.json, or a
    GGUF's keys): (flag, value, how it got it). Whether or not it loads the config's layout: an
    engine that needs the config rewritten still ignores a flag it reads nowhere."""
    return tuple(_norm(config, flag, default, how) for flag, how, default in reader.norms)


def primary_reader(which: object, *, gguf: bool = False) -> Reader | None:
    """The reading path a plain launch of the engine `which` names takes (any spelling): vLLM's
    V1 model runner, SGLang's, llama.cpp's converter (a config.json) or its GGUF reader."""
    return engine(str(which)).primary_reader(gguf=gguf)
