"""`eagle-inspect open`: the Textual app, in the terminal or (with --web) in a browser."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from inspector.commands.common import resolve_inputs
from inspector.commands.exit_codes import ExitCode

HEADLESS = ("eval", "accept", "doctor", "reconcile")


def missing_terminal() -> str | None:
    """The standard stream (stdin, stdout) that is not a terminal, which the app needs to read
    keys from and draw on; None where both are."""
    for name in ("stdin", "stdout"):
        stream = getattr(sys, name, None)
        try:
            tty = stream is not None and stream.isatty()
        except (OSError, ValueError):  # a closed or detached stream
            tty = False
        if not tty:
            return name
    return None


def no_terminal_line(stream: str) -> str:
    """The one line `open` says where it has no terminal."""
    return (
        f"eagle-inspect: error: the app needs a terminal ({stream} is not one): serve it in a "
        f"browser with `eagle-inspect open --web`, or run a headless command: "
        f"{', '.join(HEADLESS)} (eagle-inspect COMMAND --help)"
    )


def build_app(args: argparse.Namespace):
    """The app for these arguments (inputs resolved; nothing heavy imported yet)."""
    from inspector.formats.block_config import block_draft_family

    inputs = resolve_inputs(args)
    if block_draft_family(inputs.checkpoint) is not None:
        from inspector.errors import InputError
        from inspector.tui.block_app import BlockApp

        for flag, given in (
            ("--compare", args.compare),
            ("--engine-log", args.engine_log),
            ("--temperature", args.temperature > 0),
        ):
            if given:
                raise InputError(None, flag, f"not on a block draft's app yet: drop {flag}")
        return BlockApp(inputs, device=args.device, dtype=args.dtype, wiring=args.wiring)
    from inspector.tui.app import InspectorApp

    return InspectorApp(
        inputs,
        device=args.device,
        dtype=args.dtype,
        ttt_steps=args.ttt_steps,
        memory_budget=args.memory_budget,
        wiring=args.wiring,
        engine_log=args.engine_log,
        sampling=initial_sampling(args, inputs.target is not None),
        compare=None if args.compare is None else (args.compare, args.compare_wiring),
        export_dir=getattr(args, "out", None),
    )


def initial_sampling(args: argparse.Namespace, has_target: bool):
    """The sampling τ starts at (--temperature, --top-k, --top-p; None: greedy). τ starts on a
    chain, which vLLM verifies with its one-hot rule; the app's dialog (`a`) changes both."""
    from inspector.errors import InputError
    from inspector.serving.sampling_settings import (
        Sampling,
        SamplingSettings,
        Verification,
        VerifyRule,
    )

    sampling = Sampling(args.temperature, args.top_k, args.top_p)
    if sampling.greedy:
        return None
    if not has_target:
        raise InputError(
            None,
            "--temperature",
            "τ at a temperature needs the target's distributions: pass --target DIR",
        )
    return SamplingSettings.on_samples(sampling, Verification(VerifyRule.VLLM_ONEHOT), chain=True)


def web_command(args: argparse.Namespace) -> str:
    """The shell command textual-serve runs per browser tab: this app without --web."""
    argv = [sys.executable, "-m", "inspector", "open"]
    if args.checkpoint is not None:
        argv.append(str(Path(args.checkpoint).absolute()))
    argv += [str(Path(s).absolute()) for s in args.samples or []]
    for flag, value in (
        ("--target", args.target),
        ("--embed", args.embed),
        ("--tokenizer", args.tokenizer),
        ("--prompts", args.prompts),
        ("--engine-log", args.engine_log),
        ("--compare", args.compare),
        ("--out", getattr(args, "out", None)),
    ):
        if value:
            argv += [flag, value if value == "auto" else str(Path(value).absolute())]
    argv += ["--device", args.device, "--dtype", args.dtype, "--ttt-steps", str(args.ttt_steps)]
    if args.wiring:
        argv += ["--wiring", args.wiring]
    if args.compare:
        argv += ["--compare-wiring", args.compare_wiring]
    if args.slot_layers:
        argv += ["--slot-layers", args.slot_layers]
    if args.memory_budget:
        argv += ["--memory-budget", args.memory_budget]
    if args.temperature > 0:
        argv += ["--temperature", f"{args.temperature:g}", "--top-k", str(args.top_k)]
        argv += ["--top-p", f"{args.top_p:g}"]
    return shlex.join(argv)


def run_open(args: argparse.Namespace) -> int:
    if not args.web:
        # Without a terminal the app would wait for keys that never come and write escape codes
        # into a pipe: one line instead, before anything heavy loads.
        stream = missing_terminal()
        if stream is not None:
            print(no_terminal_line(stream), file=sys.stderr)
            return ExitCode.BAD_INPUT
    resolve_inputs(args)  # a missing demo or SAMPLES fails here, before any UI
    if args.web:
        try:
            from textual_serve.server import Server
        except ImportError:
            print(
                "eagle-inspect: error: --web needs textual-serve: pip install 'eagle3-inspector[web]'",
                file=sys.stderr,
            )
            return ExitCode.BAD_INPUT
        port = int(args.port)
        print(
            f"serving on http://localhost:{port} (each browser tab starts its own app and loads "
            f"the draft); from another machine: ssh -L {port}:localhost:{port} HOST",
            file=sys.stderr,
        )
        Server(web_command(args), host="localhost", port=port, title="eagle-inspect").serve()
        return 0
    # Progress bars of libraries must not draw over the screen.
    os.environ.setdefault("TQDM_DISABLE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    app = build_app(args)
    app.run()
    code = int(app.return_code or 0)
    if app.engine is not None and app.engine.alive:
        # Quit while the device thread is still loading or computing: it cannot be interrupted,
        # and an interpreter shutdown under a running torch call aborts noisily. Leave at once.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code
