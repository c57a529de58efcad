"""The wirings `reconcile` replays against an engine's log, and what an engine may be feeding.

The configured wiring first, then the wiring search's contenders for the trained wiring, what
each engine's reading of the config feeds (and its ids one off either way: `engine_fed`), the
presets and the user's wirings, without repeats; a feed that leaves an fc block at zeros
(llama.cpp's id L on a Llama-family target) is replayed with that block's fc columns zeroed
(`silent_feeds`). Pure: no printing, no files; the view words the notes."""

from __future__ import annotations

from collections.abc import Sequence

from inspector.doctor.checks.layer_ids import configured_hf_ids
from inspector.doctor.serving import slots_for_hf
from inspector.doctor.wiring.engine_reading import fed_candidates
from inspector.doctor.wiring.fed_states import (
    can_silence,
    fed_label,
    silenced,
    silent_blocks,
    slots_fed,
)
from inspector.doctor.wiring.named import engine_config_of
from inspector.engines import Engine
from inspector.errors import InputError, setting_field
from inspector.wiring import PRESETS, Wiring, parse_wiring, preset_name

# the engines' names from the registry (a rename is one edit in inspector/engines/)
_LLAMACPP = Engine.LLAMACPP.display


def configured_wiring(draft, infos, n_blocks: int):
    """The wiring the draft's config names (its aux ids as HF indices, fed in ascending order as
    engines feed them), or None when the ids are absent, ambiguous or not among the slots."""

    readings = configured_hf_ids(draft.config.aux_layer_ids, draft.config.aux_layer_convention)
    if len(readings) != 1 or len(readings[0]) != n_blocks:
        return None
    slots = slots_for_hf(readings[0], infos)
    return Wiring(slots) if slots is not None else None


def candidate_wirings(
    wiring_texts: Sequence[str] | None,
    infos,
    n_blocks: int,
    draft,
    contenders: Sequence[tuple[int, ...]] = (),
    preset_infos=None,
    engine_fed: Sequence[tuple[str, tuple[int | None, ...]]] = (),
) -> tuple[list, list[str | None], int | None, list[int]]:
    """(wirings, names, index of the configured one, indices of the search's contenders): the
    configured wiring first, then the wiring search's contenders for the trained wiring, what
    an engine may be feeding (`engine_fed`: (name, HF indices in block order), where the slots
    hold them; a feed that leaves a block at zeros is `silent_feeds`'s, replayed
    under an engine that feeds nothing for the last id only), the presets and every wiring of
    `wiring_texts` (None: the presets alone), without repeats.

    preset_infos: the slots the presets are made of, when `infos` holds more (the live loop
    captures every searched layer; the presets stay those of the draft's configured layers and
    the target's last one), matched to `infos` by HF index."""
    from inspector.wiring import Wiring

    out: list = []
    names: list[str | None] = []

    def add(w, name: str | None) -> int:
        for i, x in enumerate(out):
            if x.slots == w.slots:
                return i
        out.append(w)
        names.append(name)
        return len(out) - 1

    conf = configured_wiring(draft, infos, n_blocks)
    ci = add(conf, "configured") if conf is not None else None
    ti = [add(Wiring(tuple(w)), "searched") for w in contenders]
    for name, fed in engine_fed:
        slots = slots_fed(fed, infos) if not silent_blocks(fed) else None
        if slots is not None:
            add(Wiring(slots), name)
    for text in wiring_texts or list(PRESETS):
        name = preset_name(text)
        try:
            if name is not None and preset_infos is not None:
                add(by_layer(parse_wiring(text, preset_infos, n_blocks), preset_infos, infos), name)
            else:
                add(parse_wiring(text, infos, n_blocks), name)
        except InputError:
            if wiring_texts:  # a preset the slots cannot make is left out; an explicit one fails
                raise
    return out, names, ci, ti


def by_layer(w, source, infos):
    """`w` over `source`'s slots, as the slots of `infos` that hold the same layers."""

    at = {}
    for i, s in enumerate(infos):
        at.setdefault(s.hf_index, i)
    slots = [at.get(source[k].hf_index) for k in w.slots]
    if any(k is None for k in slots):
        raise InputError(
            None, setting_field("wiring"), f"{w.label(source)} names a layer the capture lacks"
        )
    return Wiring(tuple(slots))


def engine_fed(draft, num_layers: int | None, target: object) -> list:
    """What an engine may be feeding this draft (`engine_reading.fed_candidates`): each
    engine's reading of its config, and its ids one off either way."""

    raw, gguf = engine_config_of(draft)
    if raw is None or num_layers is None:
        return []
    readings = configured_hf_ids(draft.config.aux_layer_ids, draft.config.aux_layer_convention)
    conf = readings[0] if len(readings) == 1 else None
    return fed_candidates(
        raw, num_layers, draft.config.num_fc_blocks, conf, target=target, gguf=gguf
    )


def silent_feeds(fed, infos, draft, num_layers: int | None) -> tuple[list, list[str]]:
    """The engine feeds that leave an fc block at zeros (llama.cpp's id L on a Llama-family
    target), as (name, label, wiring, the draft with those blocks' fc columns zeroed): what the
    engine computes, where the slots hold the rest (`doctor.wiring.fed_states`); and the notes
    that say what is replayed so, or why a feed is not."""

    out = []
    notes: list[str] = []
    for name, f in fed:
        blocks = silent_blocks(f)
        slots = slots_fed(f, infos) if blocks else None
        if slots is None:
            continue
        label = f"{name} {fed_label(f, infos)}"
        if not can_silence(draft):
            notes.append(
                f"{label} not replayed: under norm_before_fc a block fed zeros changes the norm "
                "over the others"
            )
            continue
        notes.append(
            f"{name.removesuffix(' feeds')} feeds fc block"
            f"{'s' if len(blocks) > 1 else ''} {', '.join(map(str, blocks))} nothing: an id equal "
            f"to the layer count ({num_layers}) names no layer's input ({_LLAMACPP} captures the "
            f"input of layer i); replayed with those fc columns zeroed, as {_LLAMACPP}'s "
            "speculative-simple and a fresh llama-server run it"
        )
        out.append((name, label, Wiring(slots), silenced(draft, blocks)))
    return out, notes
