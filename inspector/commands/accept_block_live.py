"""`eagle-inspect accept DRAFT --live` on a block draft (DFlash, DFlash2): the block live loop
(`serving.live_block`) over --prompts against --target, reported as the EAGLE-3 live accept
reports (the same `AcceptReport`, table and JSON, mode "live").

Which wirings: `--wiring`'s, else the configured one (the config's ids as the reference reads
them) and the counting engine's feed where that is another (`doctor.wiring.block_feeds`: vLLM's
+1, SGLang's guess where the config names no ids), the layers of every row captured. The loop
is greedy and counts one engine's rounds (`--engine`, default vLLM); the flags it does not run
are one line each, exit status 2, before anything loads."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console

from inspector.commands.output import safe
from inspector.errors import InputError


def refuse_live_flags(args: argparse.Namespace) -> None:
    """The settings the block live loop does not run, each one line (exit 2)."""
    checks = [
        ("--temperature", getattr(args, "temperature", 0.0) > 0, "sampling"),
        ("--topk", getattr(args, "topk", 1) != 1, "a tree (a block draft drafts one chain)"),
        ("--p-min", getattr(args, "p_min", 0.0) or getattr(args, "n_min", 0), "an early stop"),
        ("--kv", getattr(args, "kv", "exact") != "exact", "a tree's draft KV"),
    ]
    for flag, given, what in checks:
        if given:
            raise InputError(
                None, flag, f"{what} is not run by a block draft's live loop: drop {flag}"
            )
    steps, tokens = getattr(args, "steps", None), getattr(args, "draft_tokens", None)
    if tokens is not None and steps is not None and tokens != steps + 1:
        raise InputError(None, "--draft-tokens", "a block draft's round verifies steps + 1")


def run_block_live(args: argparse.Namespace, err: Console):
    """(the live loop's report, the engine whose rounds it counts) of `accept --live` on a block
    draft."""
    from inspector.commands.accept_block import counting_engines
    from inspector.commands.accept_live import live_inputs, run_loop
    from inspector.engines import Engine
    from inspector.evaluate import resolve_device
    from inspector.formats import load_block_draft
    from inspector.formats.block_config import block_draft_family, refuse_block_forward
    from inspector.serving.live import LiveSettings
    from inspector.serving.spec import DraftSpec

    refuse_live_flags(args)
    refuse_block_forward(args.checkpoint)  # DSpark: its slots and Markov head are not run here
    family = block_draft_family(args.checkpoint) or "dflash"
    engine = counting_engines(args, family)[0] if args.engine is not None else Engine.VLLM
    draft_dir, target, prompts = live_inputs(args)
    draft = load_block_draft(
        str(draft_dir), target=str(target), dtype=args.dtype, device=resolve_device(args.device)
    )
    for note in draft.notes:
        err.print(f"note: {safe(note)}", highlight=False, soft_wrap=True)
    block = draft.config.block
    assert block is not None
    steps = args.steps or block.block_size - 1
    if steps + 1 != block.block_size:
        err.print(
            f"note: num_speculative_tokens {steps}: each round runs a block of {steps + 1} rows "
            f"(the anchor and {steps} masks); the draft was trained on blocks of "
            f"{block.block_size}",
            highlight=False,
            soft_wrap=True,
        )
    if args.wiring:
        wirings, names, layers = list(args.wiring), None, None
    else:
        wirings, names, layers = _planned_wirings(draft, target, engine, err)
    live = LiveSettings(
        spec=DraftSpec(steps),
        max_new=args.max_new,
        wirings=wirings,
        names=names,
        out=args.out,
        target_dtype=args.dtype,
        limit=args.limit,
        engine=engine,
        layers=layers,
    )
    report = run_loop(err, draft, target, prompts, live)
    if args.out:
        err.print(
            f"wrote the realised sequences per wiring under {safe(args.out)}: "
            f"eagle-inspect accept {safe(draft_dir)} {safe(args.out)}/<wiring> --target "
            f"{safe(target)} --steps {steps} replays them",
            highlight=False,
            soft_wrap=True,
        )
    return report, engine


def _planned_wirings(draft, target: Path, engine, err: Console):
    """(wirings as slot lists, their names, the layers to capture): the configured row and the
    engine's feed where it is another (`accept_rows` over `block_feeds`), a reader that cannot
    serve the config a note."""
    from inspector.capture.plan import plan_slots
    from inspector.doctor.wiring.block_feeds import accept_rows, block_feeds
    from inspector.formats.layer_convention import target_layer_count
    from inspector.serving.live import draft_ids, plan_infos
    from inspector.wiring import layers_wiring

    block = draft.config.block
    num_layers = target_layer_count(target) or block.num_target_layers
    if not num_layers:
        raise InputError(target, "num_hidden_layers", "the target's layer count is not known")
    raw = json.loads((Path(draft.path) / "config.json").read_text())
    feeds = block_feeds(raw, block, num_layers, draft.config.num_fc_blocks, [engine])
    for f in feeds:
        if f.fed is None:
            err.print(
                f"note: {safe(f.reader)} feeds nothing to run: {safe(f.problem or '')}",
                highlight=False,
                soft_wrap=True,
            )
    rows = accept_rows(tuple(block.hf_layer_ids), None, feeds)
    held = sorted({k for r in rows for k in r.layers})
    layers = ",".join(map(str, held))
    infos = plan_infos(plan_slots(num_layers, layers=layers, draft=draft_ids(draft)))
    wirings, names = [], []
    for row in rows:
        w = layers_wiring(row.layers, infos)
        assert w is not None, row  # every row's layers are captured
        wirings.append(list(w.slots))
        names.append(row.name)
    return wirings, names, layers
