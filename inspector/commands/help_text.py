"""Help that answers: each command's --help ends with a worked example on the bundled demo, and a
bad or missing argument gets one line of error and one line saying what the command needs (the
README's triage table, per command)."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from inspector.engines import Engine

VLLM, SGL = Engine.VLLM.display, Engine.SGLANG.display

# what each command needs, in one line: printed under an error
TRIAGE = {
    "eval": "eval takes a draft (folder or .gguf) and samples; add --target for the trainers' "
    "metrics; no arguments: the demo",
    "accept": "accept takes a draft and samples (or --live --prompts P --target T); --engine "
    "vllm|sglang|llamacpp and --steps say whose count",
    "compare": "compare takes two drafts and the samples both are replayed over",
    "doctor": "doctor takes a draft and samples; --target T lets it measure which layer each "
    "slot is; a .gguf with --source HF_DIR says what the conversion changed",
    "open": "open takes a draft and samples (no arguments: the demo); --web serves it in a browser",
    "capture": "capture takes a target folder and prompts (JSONL or .txt), writes samples to --out",
    "reconcile": "reconcile takes a draft, --engine-log LOG, and what the engine served: samples, "
    "or --prompts P --target T",
    "sweep": "sweep takes a training run's folder (its checkpoints) and samples",
    "demo": "demo build rebuilds the bundled demo; demo run --out DIR trains a run to sweep",
}
GENERAL = (
    "which command answers what: the README's table; every command's --help ends with an example"
)

# a worked example per command, on the bundled demo (paths from the project's root)
EXAMPLES = {
    "eval": """Example (the demo draft on its held-out samples, the trainers' metrics beside ours):
  eagle-inspect eval assets/demo/draft assets/demo/samples/held --target auto
  -> one row per wiring: train [embed, L2, L4] against serve [L2, L4, L6], all-tok accuracy per
     TTT step, in-vocab, coverage; then speculators' full_acc / cond_acc as its log shows them""",
    "accept": f"""Example (the accept length {VLLM} and {SGL} log, replayed on captured requests):
  eagle-inspect capture assets/demo/target assets/demo/prompts.jsonl --out cap \\
      --draft assets/demo/draft --generate 128 --save-dtype float32
  eagle-inspect accept assets/demo/draft cap --target assets/demo/target --steps 3
  -> per wiring: accept len (1 + accepted / rounds), the share of rounds accepting >= k,
     rounds, accepted; --engine llamacpp counts as llama-server does""",
    "compare": """Example (two checkpoints of one run on the same requests):
  eagle-inspect compare run/epoch_0_step_0 run/epoch_23_step_72 assets/demo/samples/held
  -> each draft's accept length, B - A with a 95% bootstrap interval, by depth and context""",
    "doctor": """Example (why a deployed draft accepts little):
  eagle-inspect doctor assets/demo/draft assets/demo/samples/held --target assets/demo/target
  -> findings, worst first: the wiring the weights were trained on, what each engine feeds
     them read from the config, and the config lines that fix it (exit 1 on an error)""",
    "open": """Example (the app on the demo; the same as a bare `eagle-inspect`):
  eagle-inspect open assets/demo/draft assets/demo/samples/train --target assets/demo/target
  -> page samples with [ ], positions with the arrows, toggle the wiring with t / s, F1: help""",
    "capture": """Example (samples an engine would serve, with the target's continuation):
  eagle-inspect capture assets/demo/target assets/demo/prompts.jsonl --out cap \\
      --draft assets/demo/draft --generate 128
  -> cap/ holds speculators v1 samples of the layers the draft's config names""",
    "reconcile": f"""Example (what {VLLM} logged, explained; `bash .ci/vllm --out runs` makes \
the log):
  eagle-inspect reconcile assets/demo/draft cap --engine-log runs/train-k3-one/vllm.log \\
      --target assets/demo/target
  -> the verdict (as is, wrong wiring, engine fault, other data), the wiring the engine fed,
     the trained one, and each wiring's replay of the same requests beside the logged figure
     (exit 1 on any verdict but as is)""",
    "sweep": """Example (which checkpoint of a run to ship):
  eagle-inspect demo run --out run
  eagle-inspect sweep run assets/demo/samples/held
  -> accept length per checkpoint against the step, a chart, the best and how far the last is""",
    "demo": """Example (a training run to try sweep on, 3 minutes on a CPU):
  eagle-inspect demo run --out run""",
}


class ExampleFormatter(argparse.HelpFormatter):
    """argparse's formatter, but an epilog starting "Example" keeps its lines as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("Example"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


class Parser(argparse.ArgumentParser):
    """An argument error is one line, then what the command needs (`TRIAGE`)."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix("eagle-inspect").strip().split(" ")[0]
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.stderr.write(f"  {TRIAGE.get(command, GENERAL)} (--help: flags and an example)\n")
        raise SystemExit(2)


def add_examples(parser: argparse.ArgumentParser) -> None:
    """Every subcommand's epilog: its worked example."""
    for action in parser._actions:  # argparse keeps its subcommands nowhere public
        if isinstance(action, argparse._SubParsersAction):
            for name, p in action.choices.items():
                if name in EXAMPLES and not p.epilog:
                    p.epilog = EXAMPLES[name]
                p.formatter_class = ExampleFormatter


def triage(command: str | None) -> str:
    return TRIAGE.get(command or "", GENERAL)
