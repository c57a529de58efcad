"""eagle-inspect {open, eval, accept, compare, doctor, capture, reconcile, demo}: argument
parsing and dispatch only.

Heavy imports (torch, textual) happen inside the command functions, so `--help` is instant and the
app can paint before torch loads.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from inspector import __version__
from inspector.commands.arguments import (
    LCPP,
    RECONCILE_DESCRIPTION,
    VLLM,
    SuggestingParser,
    add_compare_parser,
    add_doctor_probe_args,
    add_early_stop_args,
    add_engine_args,
    add_reconcile_args,
    add_sampling_args,
    doctor_engine,
    lowercase,
    non_negative,
    port,
    positive,
)
from inspector.commands.exit_codes import ExitCode, failure_line
from inspector.commands.output import visible
from inspector.errors import InputError


def _add_model_args(
    p: argparse.ArgumentParser, *, samples_optional: bool = True, ttt: bool = True
) -> None:
    nargs = "?" if samples_optional else None
    p.add_argument(
        "checkpoint",
        nargs=nargs,
        metavar="CKPT",
        help=f"draft checkpoint folder, or a {LCPP} EAGLE-3 .gguf file (default: the bundled demo)",
    )
    p.add_argument(
        "samples",
        nargs="*" if samples_optional else "+",
        metavar="SAMPLES",
        help="sample folder(s), glob(s) or file(s) (default: the demo's samples/train)",
    )
    p.add_argument(
        "--target",
        metavar="DIR",
        help="target model folder: embedding if the draft lacks one, norm + lm_head for the "
        "trainers' metrics, and for doctor the model it runs to tell which layer every slot is; "
        "'auto': the verifier the draft's config names, found on this machine "
        "(a folder, or the local Hugging Face cache)",
    )
    p.add_argument(
        "--embed", metavar="FILE", help="safetensors file holding model.embed_tokens.weight"
    )
    p.add_argument(
        "--prompts",
        metavar="INPUT",
        help="instead of SAMPLES: capture INPUT (JSONL or .txt, see `capture`) through --target "
        "into a cache folder and use that",
    )
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N (default auto)")
    p.add_argument(
        "--dtype", default="auto", help="auto (as stored) | float32 | bfloat16 | float16"
    )
    p.add_argument(
        "--memory-budget",
        metavar="SIZE",
        help="memory the caches may keep, e.g. 8G or 30%% (of available RAM / free GPU memory); "
        "default 25%% of RAM, 40%% of GPU memory (or $EAGLE_INSPECT_MEMORY_BUDGET)",
    )
    if ttt:  # accept takes the engine's --steps instead
        p.add_argument(
            "--ttt-steps",
            type=positive,
            default=1,
            metavar="K",
            help="teacher-forced TTT steps to run (default 1)",
        )
    p.add_argument(
        "--slot-layers",
        metavar="IDS",
        help="HF hidden_states index of every slot, e.g. 0,2,4,6 (0 = embedding output, k = "
        "output of decoder layer k-1; default: data_config.json)",
    )


def _add_capture_parser(sub: argparse._SubParsersAction) -> None:
    from inspector.capture.conventions import ENGINES

    p = sub.add_parser(
        "capture",
        help="run a target model (transformers) over prompts and write speculators v1 samples",
        description="Run TARGET over INPUT and write the hidden-state slots as speculators v1 "
        "samples (data_{i}.pt + data_config.json with HF indices) that every command reads. "
        'INPUT: JSONL lines {"input_ids", "loss_mask"} | {"text"} | {"prompt", "response"} | '
        '{"messages"}, or a .txt file cut into --max-length samples. Resumable.',
    )
    p.add_argument("target_model", metavar="TARGET", help="Hugging Face model folder")
    p.add_argument("input", metavar="INPUT", help="JSONL file, or a .txt file")
    p.add_argument("--out", required=True, metavar="DIR", help="new or empty folder (or a rerun's)")
    p.add_argument(
        "--layers",
        metavar="IDS",
        help="HF hidden_states indices, e.g. 0,2,4,6 (0 = embedding, L = last layer before the "
        "final norm, always captured last), 'auto' (the draft's configured ids), 'post-norm' "
        "(an extra slot). Default: auto with --draft, else 2,L//2,L-3,L",
    )
    p.add_argument("--draft", metavar="CKPT", help="draft checkpoint, for --layers auto / --engine")
    p.add_argument(
        "--engine",
        type=lowercase,
        choices=ENGINES,
        help="write the slots exactly as this engine feeds --draft, given its config "
        "(sglang = since PR #25454, vllm = EagleModelMixin capture)",
    )
    p.add_argument(
        "--generate",
        type=int,
        default=0,
        metavar="N",
        help="first let the target continue each prompt by up to N tokens; the loss mask covers them",
    )
    p.add_argument(
        "--past-stop",
        type=int,
        default=16,
        metavar="C",
        help="with --generate: also write the target's next C tokens after each request's stop, "
        "outside the request, which an engine's last round is counted against (default 16; 0: none)",
    )
    p.add_argument(
        "--temperature", type=float, default=0.0, help="0 = greedy (default); > 0 samples"
    )
    p.add_argument("--seed", type=int, default=0, help="seed for --temperature sampling")
    p.add_argument(
        "--max-length",
        type=int,
        metavar="N",
        help="tokens per sample (default min(2048, max_position_embeddings))",
    )
    p.add_argument(
        "--dtype",
        default="auto",
        help="auto (the checkpoint's) | float32 | bfloat16 | float16",
    )
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N (default auto)")
    p.add_argument(
        "--device-map",
        metavar="MAP",
        help="'auto': spread a model larger than one GPU over all of them (needs accelerate)",
    )
    p.add_argument(
        "--save-dtype",
        default="bfloat16",
        help="dtype of the saved slots: bfloat16 (default, as speculators) | float16 | float32",
    )


def _add_accept_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "accept",
        help="the accept length an engine would log, per wiring: replayed from samples, or live",
        description="Replay speculative decoding over saved samples exactly as the engines draft "
        "and verify (greedy), per wiring: tokens emitted per round, the share of rounds accepting "
        "at least k drafted tokens, by context position. --live runs real speculative decoding "
        "against --target on --prompts instead.",
    )
    _add_model_args(p, ttt=False)
    p.add_argument(
        "--wiring",
        action="append",
        metavar="W",
        help="train | serve | 0,1,2 | embed,L3,L31 (repeatable; default: train and serve)",
    )
    add_engine_args(p)
    p.add_argument("--limit", type=positive, metavar="N", help="replay only the first N samples")
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    p.add_argument(
        "--fail-under",
        type=float,
        metavar="X",
        help=f"exit {ExitCode.GATE:d} (one line on stderr) when a reported wiring's accept length is "
        "below X (a block draft: the rows its first engine feeds, else configured; or --wiring)",
    )
    p.add_argument(
        "--profile",
        metavar="FILE",
        help="also write the first wiring's acceptance profile (speculation_profile.json: "
        "conditional and marginal rates per position, the accept-length histogram, the "
        "conditions) to FILE",
    )
    from inspector.commands.accept_sweep import add_sweep_args

    add_sweep_args(p)
    p.add_argument(
        "--live",
        action="store_true",
        help="run speculative decoding against --target on --prompts (transformers) instead",
    )
    p.add_argument(
        "--max-new",
        type=positive,
        default=128,
        metavar="M",
        help="--live: tokens to generate per prompt, the prefill's included (default 128)",
    )
    add_sampling_args(p, when="--live, or SAMPLES with --target")
    add_early_stop_args(p)
    p.add_argument(
        "--out",
        metavar="DIR",
        help="--live: write the realised sequences as samples (the capture format) to DIR",
    )


def _add_reconcile_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "reconcile",
        help="what an engine logged, explained: its accept length against the replay of the "
        "same requests under each wiring",
        description=RECONCILE_DESCRIPTION,
    )
    _add_model_args(p, ttt=False)
    add_reconcile_args(p)


def build_parser() -> argparse.ArgumentParser:
    from inspector.commands.help_text import add_examples

    parser = SuggestingParser(
        prog="eagle-inspect",
        description="Inspect an EAGLE-3 draft: re-run it on saved samples, toggle the wiring of "
        "captured hidden states into fc, and find train/serve mismatches.",
    )
    parser.add_argument("--version", action="version", version=f"eagle-inspect {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=SuggestingParser)

    p_eval = sub.add_parser("eval", help="accuracy per wiring and TTT step, as a table or JSON")
    _add_model_args(p_eval)
    p_eval.add_argument(
        "--wiring",
        action="append",
        metavar="W",
        help="train | serve | 0,1,2 | embed,L3,L31 (repeatable; default: train and serve)",
    )
    p_eval.add_argument(
        "--limit", type=positive, metavar="N", help="evaluate only the first N samples"
    )
    p_eval.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    p_eval.add_argument(
        "--positions", action="store_true", help="include every position in the JSON"
    )
    p_eval.add_argument("--per-sample", action="store_true", help="also print a per-sample table")
    p_eval.add_argument(
        "--metrics",
        choices=("default", "ours", "speculators", "specforge", "all"),
        default="default",
        help="which accuracies the table shows: ours (what serving sees), the trainers' own "
        "(what their logs show; need the verifier), or all; default: ours plus the trainer of "
        "the checkpoint's layout",
    )

    _add_accept_parser(sub)
    add_compare_parser(sub)

    p_doc = sub.add_parser(
        "doctor",
        help="find the wiring the draft was trained for, every train/serve mismatch, and the fix",
    )
    _add_model_args(p_doc)
    p_doc.add_argument(
        "--samples",
        dest="n_samples",
        type=positive,
        default=8,
        metavar="N",
        help="run the checks on the first N samples (default 8)",
    )
    p_doc.add_argument(
        "--max-tokens",
        type=non_negative,
        default=None,
        metavar="N",
        help="read each sample up to its first N tokens; 0: whole samples (default: as many as "
        "a compute budget of about a minute on two CPU cores allows; small drafts read whole "
        "samples)",
    )
    add_sampling_args(p_doc, "the wiring finding's accept length (with --target)", seed=False)
    p_doc.add_argument(
        "--engine",
        action="append",
        type=doctor_engine,
        metavar="ENGINE",
        help="the engine_feeds finding shows only this engine's readings of the config "
        f"(repeatable: vllm, sglang, {LCPP}, in any spelling: {VLLM}, llamacpp; default every "
        "engine)",
    )
    add_doctor_probe_args(p_doc)
    p_doc.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    p_doc.add_argument(
        "--source",
        metavar="PATH",
        help=f"the other side of a {LCPP} conversion: the HF draft folder a .gguf CKPT was "
        "converted from (or the .gguf of a folder CKPT); adds what the conversion changed (layer "
        "ids, norm flags, d2t, the weights' rounding); SAMPLES become optional",
    )
    p_doc.add_argument(
        "--parent",
        metavar="CKPT",
        help="the checkpoint CKPT was fine-tuned from: adds what changed (capture ids, config, "
        "tensors dropped or changed) and whether the vocabulary map moved under the weights",
    )
    p_doc.add_argument(
        "--write-fixed",
        metavar="OUT",
        help="write a fixed checkpoint to the new folder OUT (fc blocks permuted for the engines' "
        "ascending capture order, d2t and config fixes applied) and verify it",
    )

    p_open = sub.add_parser("open", help="open the inspector app (default command)")
    _add_model_args(p_open)
    p_open.add_argument("--tokenizer", metavar="FILE", help="tokenizer.json for decoding token ids")
    p_open.add_argument("--wiring", metavar="W", help="initial wiring (default train)")
    p_open.add_argument(
        "--engine-log",
        metavar="FILE",
        help="what an engine logged (reconcile's formats): its accept length shows beside τ, "
        "and τ starts under its draft steps",
    )
    p_open.add_argument(
        "--compare",
        metavar="CKPT_B",
        help="a second draft over the same samples: `b` shows the shown sample under both "
        "(each one's predictions and serving replay) and steps through the rows where they part",
    )
    p_open.add_argument(
        "--compare-wiring",
        default="train",
        metavar="W",
        help="the second draft's wiring (default train: its own)",
    )
    add_sampling_args(
        p_open,
        "τ's expected accept length under the engine's rule (needs --target; `a` changes it)",
        seed=False,
        verification=False,
    )
    p_open.add_argument(
        "--web", action="store_true", help="serve the app in a browser on localhost"
    )
    p_open.add_argument("--port", type=port, default=8000, help="port for --web (default 8000)")
    p_open.add_argument(
        "--out",
        metavar="DIR",
        help="the folder `e` exports a sample's JSON into (default ./eagle-inspect-exports, "
        "made on the first export; never a folder the inputs came from)",
    )

    _add_capture_parser(sub)
    _add_reconcile_parser(sub)
    from inspector.commands.sweep import add_sweep_parser

    add_sweep_parser(sub)

    p_demo = sub.add_parser("demo", help="the bundled demo")
    demo_sub = p_demo.add_subparsers(dest="demo_command", parser_class=SuggestingParser)
    p_build = demo_sub.add_parser("build", help="rebuild the demo (trains a target and a draft)")
    p_build.add_argument("--out", metavar="DIR", help="output folder (default assets/demo)")
    p_build.add_argument("--seed", type=non_negative, default=0)
    p_run = demo_sub.add_parser(
        "run", help="a training run of the demo draft, checkpoints for `eagle-inspect sweep`"
    )
    p_run.add_argument("--out", metavar="DIR", required=True, help="the run's folder (new)")
    p_run.add_argument("--init", choices=("shipped", "scratch"), default="shipped")
    p_run.add_argument("--epochs", type=positive, default=24)
    p_run.add_argument("--every", type=positive, default=9, help="steps between checkpoints")
    p_run.add_argument("--seed", type=non_negative, default=0)
    add_examples(parser)
    return parser


def _say(line: str) -> None:
    try:
        print(line, file=sys.stderr)
    except (BrokenPipeError, OSError):
        pass


def _silence_stdout() -> None:
    """Point stdout at /dev/null: the interpreter's last flush must not fail a second time."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _closed_streams_to_devnull() -> None:
    """A process started with stdout or stderr closed (`eval >&-`) has None there: write to
    /dev/null instead, as a reader that left early would see."""
    for name in ("stdout", "stderr"):
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, "w"))  # noqa: SIM115 - lives as long as the process


def main(argv: Sequence[str] | None = None) -> int:
    _closed_streams_to_devnull()
    parser = build_parser()
    args = parser.parse_args(argv)
    command = args.command or "open"
    try:
        if command == "eval":
            from inspector.commands.eval import run_eval

            return run_eval(args)
        if command == "accept" and args.sweep and args.fail_under is not None:
            raise InputError(None, "--fail-under", "gates a replay or --live, not --sweep")
        if command == "accept" and args.sweep and args.temperature > 0:
            raise InputError(
                None, "--temperature", "the sweep ranks greedy settings; not with --sweep"
            )
        if command == "accept" and args.sweep:
            from inspector.commands.accept_sweep import run_sweep_command

            return run_sweep_command(args)
        if command == "accept":
            from inspector.commands.accept import run_accept

            return run_accept(args)
        if command == "compare":
            from inspector.commands.compare import run_compare

            return run_compare(args)
        if command == "doctor":
            from inspector.commands.doctor import run_doctor

            return run_doctor(args)
        if command == "open":
            if args.command is None:  # bare `eagle-inspect`: the demo, all defaults
                args = parser.parse_args(["open"])
            from inspector.commands.open import run_open

            return run_open(args)
        if command == "capture":
            from inspector.commands.capture import run_capture

            return run_capture(args)
        if command == "reconcile":
            from inspector.commands.reconcile import run_reconcile

            return run_reconcile(args)
        if command == "sweep":
            from inspector.commands.sweep import run_sweep_run

            return run_sweep_run(args)
        if command == "demo":
            if args.demo_command not in ("build", "run"):
                parser.parse_args(["demo", "--help"])
            from inspector.demo.__main__ import main as demo_main

            if args.demo_command == "run":
                run_args = ["run", "--out", args.out, "--init", args.init, "--seed", str(args.seed)]
                return demo_main(
                    [*run_args, "--epochs", str(args.epochs), "--every", str(args.every)]
                )
            build_args = ["build", "--seed", str(args.seed)]
            if args.out:
                build_args += ["--out", args.out]
            return demo_main(build_args)
    except InputError as e:
        from inspector.commands.help_text import triage

        _say(f"eagle-inspect: error: {visible(e)}")
        _say(f"  {triage(command)} (eagle-inspect {command} --help: flags and an example)")
        return ExitCode.BAD_INPUT
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED
    except BrokenPipeError:  # `eagle-inspect eval | head`: the reader left; end quietly
        _silence_stdout()
        return ExitCode.OK
    except Exception as e:  # out of memory, a device error: one line; a crash: its traceback too
        _say(f"eagle-inspect: failed: {visible(failure_line(e))}")
        return ExitCode.FAILED
    parser.print_help()
    return ExitCode.BAD_INPUT
