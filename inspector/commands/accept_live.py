"""`eagle-inspect accept --live`: real speculative decoding against the target (transformers)."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from inspector.commands.output import safe
from inspector.errors import InputError
from inspector.progress import progress_bar
from inspector.wiring import PRESETS

if TYPE_CHECKING:
    from inspector.engines import Engine
    from inspector.model import Draft
    from inspector.serving.live import LiveSettings
    from inspector.serving.replay import AcceptReport


def live_inputs(args: argparse.Namespace) -> tuple[Path, Path, Path]:
    """(draft, target, prompts): as given, or the bundled demo's when CKPT is left out."""
    if args.samples:
        raise InputError(None, "SAMPLES", "--live generates its own: pass --prompts INPUT instead")
    if args.checkpoint is None:
        from inspector.demo_paths import demo_paths

        demo = demo_paths()
        target = Path(args.target) if args.target and args.target != "auto" else demo.target
        return demo.draft, target, Path(args.prompts) if args.prompts else demo.prompts
    if not args.target:
        raise InputError(None, "--target", "--live runs the target: pass --target DIR")
    if not args.prompts:
        raise InputError(None, "--prompts", "--live needs prompts: pass --prompts INPUT")
    target = Path(args.target)
    if args.target == "auto":
        from inspector.commands.common import resolve_inputs

        target = resolve_inputs(
            argparse.Namespace(**{**vars(args), "prompts": None, "samples": ["-"]})
        ).target
    return Path(args.checkpoint), target, Path(args.prompts)


def load_live_draft(args: argparse.Namespace) -> tuple[Path, Path, Path, Draft]:
    """(draft folder, target, prompts, the loaded draft) of a live run: `live_inputs`, then the
    draft on --device in --dtype with the target's head and embedding where it lacks them."""
    from inspector.serving.live import open_live_draft

    draft_dir, target, prompts = live_inputs(args)
    draft = open_live_draft(draft_dir, target, dtype=args.dtype, device=args.device)
    return draft_dir, target, prompts, draft


def sampling_options(args: argparse.Namespace, engine: Engine) -> dict[str, Any]:
    """The live loop's sampling fields (`LiveSettings`'s) from --temperature/--top-k/--top-p/--seed
    and the verification rule (the flags', else `engine`'s default)."""
    from inspector.commands.arguments import verification_from_args

    return dict(
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        verification=verification_from_args(args, engine),
        seed=args.seed,
    )


def run_loop(
    err: Console, draft, target: Path, prompts: Path, live: LiveSettings, *, model=None
) -> AcceptReport:
    """`serving.live.live_accept` under a progress bar on stderr; `model`: the target already
    loaded, or None."""
    from inspector.serving.live import live_accept

    with progress_bar("speculative decoding", err) as advance:
        return live_accept(draft, target, prompts, live, progress=advance, model=model)


def run_live(args: argparse.Namespace, spec, err: Console, engine=None):
    from inspector.commands.common import as_engine_runs_it
    from inspector.engines import default_engine
    from inspector.serving.live import LiveSettings
    from inspector.wiring import parse_wiring, preset_name

    engine = engine or default_engine(spec.is_chain)
    draft_dir, target, prompts, draft = load_live_draft(args)
    num_layers, target_class, infos = _live_slots(target, draft)
    run = as_engine_runs_it(err, draft, engine, num_layers=num_layers, target=target_class)
    wirings: list = list(args.wiring or PRESETS)
    names: list = [preset_name(w) for w in wirings]
    # what the engine feeds, as `accept` replays it: its own row, its own draft where it leaves
    # a block at zeros
    feed = None if args.wiring else run.feed(infos)
    silent = None
    if feed is not None:
        wiring, fed_draft, label = feed
        if fed_draft is run.draft:
            shown = {parse_wiring(w, infos, draft.config.num_fc_blocks).slots for w in wirings}
            if wiring.slots not in shown:
                wirings.append(list(wiring.slots))
                names.append(label)
        else:
            silent = feed
    live = LiveSettings(
        spec=spec,
        max_new=args.max_new,
        wirings=wirings,
        names=names,
        out=args.out,
        target_dtype=args.dtype,
        limit=args.limit,
        engine=engine,
        **sampling_options(args, engine),
    )
    report = run_loop(err, run.draft, target, prompts, live)
    if silent is not None:
        wiring, fed_draft, label = silent
        fed = replace(live, wirings=[list(wiring.slots)], names=[label], out=None)
        more = run_loop(err, fed_draft, target, prompts, fed)
        report.wirings.extend(more.wirings)
    if feed is not None:  # the feed's row labelled as reconcile labels it
        report.wirings = [
            replace(w, label=w.name) if w.name == feed[2] else w for w in report.wirings
        ]
    if args.out:
        err.print(
            f"wrote the realised sequences per wiring under {safe(args.out)}: "
            f"eagle-inspect accept {safe(draft_dir)} {safe(args.out)}/<wiring> replays them",
            highlight=False,
            soft_wrap=True,
        )
    return report


def _live_slots(target: Path, draft) -> tuple[int | None, object, list]:
    """(the target's layer count, its class, the slots the live loop captures for `draft`: its
    configured ids and the target's last state, as `serving.live` plans them)."""
    from inspector.capture.plan import plan_slots
    from inspector.capture.transformers_target import read_target_info
    from inspector.formats.target_config import read_target_class
    from inspector.serving.live import draft_ids, plan_infos

    info = read_target_info(target)
    infos = plan_infos(plan_slots(info.num_layers, draft=draft_ids(draft)))
    return info.num_layers, read_target_class(target), infos
