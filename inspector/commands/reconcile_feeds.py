"""What an engine may be feeding the draft, for `reconcile` to replay: each engine's reading of
the draft's config (and its ids one off either way), and the feeds that leave an fc block at
zeros, replayed with that block's fc columns zeroed (`doctor.wiring.fed_states`)."""

from __future__ import annotations

from inspector.commands.output import safe


def engine_fed(draft, num_layers: int | None, target: object) -> list:
    """What an engine may be feeding this draft (`engine_reading.fed_candidates`): each
    engine's reading of its config, and its ids one off either way."""
    from inspector.doctor.checks.layer_ids import configured_hf_ids
    from inspector.doctor.wiring.engine_reading import fed_candidates
    from inspector.doctor.wiring.named import engine_config_of

    raw, gguf = engine_config_of(draft)
    if raw is None or num_layers is None:
        return []
    readings = configured_hf_ids(draft.config.aux_layer_ids, draft.config.aux_layer_convention)
    conf = readings[0] if len(readings) == 1 else None
    return fed_candidates(
        raw, num_layers, draft.config.num_fc_blocks, conf, target=target, gguf=gguf
    )


def silent_feeds(fed, infos, draft, num_layers: int | None, err) -> list:
    """The engine feeds that leave an fc block at zeros (llama.cpp's id L on a Llama-family
    target), as (name, label, wiring, the draft with those blocks' fc columns zeroed): what the
    engine computes, where the slots hold the rest (`doctor.wiring.fed_states`)."""
    from inspector.doctor.wiring.fed_states import (
        can_silence,
        fed_label,
        silenced,
        silent_blocks,
        slots_fed,
    )
    from inspector.wiring import Wiring

    out = []
    for name, f in fed:
        blocks = silent_blocks(f)
        slots = slots_fed(f, infos) if blocks else None
        if slots is None:
            continue
        label = f"{name} {fed_label(f, infos)}"
        if not can_silence(draft):
            err.print(
                f"note: {safe(label)} not replayed: under norm_before_fc a block fed zeros "
                "changes the norm over the others",
                highlight=False,
                soft_wrap=True,
            )
            continue
        err.print(
            f"note: {safe(name.removesuffix(' feeds'))} feeds fc block"
            f"{'s' if len(blocks) > 1 else ''} {', '.join(map(str, blocks))} nothing: an id equal "
            f"to the layer count ({num_layers}) names no layer's input (llama.cpp captures the "
            "input of layer i); replayed with those fc columns zeroed, as llama.cpp's "
            "speculative-simple and a fresh llama-server run it",
            highlight=False,
            soft_wrap=True,
        )
        out.append((name, label, Wiring(slots), silenced(draft, blocks)))
    return out
