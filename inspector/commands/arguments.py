"""Argument types and the argument groups more than one command shares (the engine settings a
replay runs under), and `compare`'s parser; `inspector.cli` builds the rest."""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Sequence

from inspector.commands.gates import EXIT_GATE
from inspector.commands.help_text import Parser
from inspector.engines import SERVING, Engine
from inspector.engines import engine as serving_engine

# the SGLang release whose scheduler the help describes
SGLANG = serving_engine(Engine.SGLANG).label
# the engines' names as help words, from the registry (a rename is one edit in engines/)
VLLM, SGL, LCPP = (e.display for e in (Engine.VLLM, Engine.SGLANG, Engine.LLAMACPP))


def nearest(text: str, known: Sequence[str], cutoff: float = 0.7) -> str | None:
    """The known spelling nearest `text` (any case; difflib's ratio at least `cutoff`)."""
    by_lower = {k.lower(): k for k in known}
    near = difflib.get_close_matches(text.lower(), list(by_lower), n=1, cutoff=cutoff)
    return by_lower[near[0]] if near else None


class SuggestingParser(Parser):
    """The project's parser (`help_text.Parser`: one error line, then what the command needs)
    that also corrects: a misspelt command, choice or flag gets the nearest right one (Python
    3.11's argparse has no suggest_on_error)."""

    def _check_value(self, action: argparse.Action, value) -> None:
        try:
            super()._check_value(action, value)
        except argparse.ArgumentError as e:
            near = nearest(str(value), [str(c) for c in action.choices or ()])
            if near is None:
                raise
            raise argparse.ArgumentError(action, f"{e.message}; did you mean {near!r}?") from None

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            parser = self._chosen(ns)
            hints = []
            for extra in extras:
                if extra.startswith("-") and len(extra) > 1:
                    options = [o for a in parser._actions for o in a.option_strings]
                    near = nearest(extra.split("=", 1)[0], options)
                    hint = f"did you mean {near}?"
                    if near is not None and hint not in hints:
                        hints.append(hint)
            message = f"unrecognized arguments: {' '.join(extras)}"
            parser.error("; ".join([message, *hints]))
        return ns

    def _chosen(self, ns: argparse.Namespace) -> argparse.ArgumentParser:
        """The (sub)command's parser the arguments went to, so its flags are the ones offered
        and its error line says what it needs."""
        parser: argparse.ArgumentParser = self
        while True:
            sub = next(
                (a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None
            )
            name = None if sub is None else getattr(ns, sub.dest, None)
            if sub is None or name not in sub.choices:
                return parser
            parser = sub.choices[name]


def engine_name(text: str, *, serving: bool = True) -> str:
    """--engine: any spelling the engines' registry reads (vllm / vLLM, llamacpp / llama.cpp /
    llama-cpp, ...; any case), as the engine's id. `serving`: only engines whose accept length
    the tool replays."""
    from inspector.engines import parse_engine
    from inspector.errors import InputError

    try:
        return parse_engine(text, True, serving=serving).value
    except InputError as e:
        raise argparse.ArgumentTypeError(e.message) from None


def doctor_engine(text: str) -> str:
    """doctor's --engine: every engine the registry holds, those that run no EAGLE-3 draft too
    (the doctor says what each would feed)."""
    return engine_name(text, serving=False)


def lowercase(text: str) -> str:
    """A choice read in any case (capture --engine vLLM)."""
    return text.strip().lower()


def integer(text: str) -> int:
    # ASCII digits only: int() also reads other scripts' digits, which no one means here.
    t = text.strip()
    if not t.lstrip("+-").isascii() or not t.lstrip("+-").isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer")
    return int(t)


def positive(text: str) -> int:
    n = integer(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be at least 1")
    return n


def non_negative(text: str) -> int:
    n = integer(text)
    if n < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be 0 or more")
    return n


def port(text: str) -> int:
    n = integer(text)
    if not 1 <= n <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r}: a TCP port is 1..65535")
    return n


def add_doctor_probe_args(p: argparse.ArgumentParser) -> None:
    """doctor's --steps (the engine's draft length, against which a block draft's block_size is
    checked: a round runs the anchor and K masks), --no-capture (a block draft's search over
    the held layers only) and --trace (`add_trace_arg`)."""
    add_trace_arg(p)
    p.add_argument(
        "--no-capture",
        action="store_true",
        help="block drafts: search only the layers the samples hold (default with --target: "
        "run the target over the first samples and search every layer)",
    )
    p.add_argument(
        "--steps",
        type=positive,
        metavar="K",
        help=f"the engine's draft length ({VLLM} num_speculative_tokens): a block draft's "
        "block_size is checked against it",
    )


def add_trace_arg(p: argparse.ArgumentParser) -> None:
    """doctor's --trace: one sample through the trained path and each engine's
    (`doctor.trace`)."""
    p.add_argument(
        "--trace",
        metavar="N",
        type=int,
        nargs="?",
        const=0,
        default=None,
        help="run sample N (default 0) through the draft as its trainer computed it and as "
        "each engine runs it (--engine: only those); per stage the norm ratio, the first stage "
        "where they part and the cause (an embedding scale, a norm flag, a dtype, the "
        "vocabulary map, the token/feature shift, the wiring, a dropped feature)",
    )


def add_engine_args(p: argparse.ArgumentParser) -> None:
    """The engine settings a replay runs under (accept's, and compare's for both drafts)."""
    from inspector.serving.spec import KV_MODES

    p.add_argument(
        "--steps",
        type=positive,
        metavar="S",
        help=f"draft steps per round: {SGL} --speculative-num-steps, {VLLM} "
        "num_speculative_tokens (default 3)",
    )
    p.add_argument(
        "--topk",
        type=positive,
        default=1,
        metavar="K",
        help=f"branches per tree node: {SGL} --speculative-eagle-topk (default 1: a chain)",
    )
    p.add_argument(
        "--draft-tokens",
        type=positive,
        metavar="N",
        help=f"tokens verified per round, the root included: {SGL} "
        "--speculative-num-draft-tokens (a chain: steps + 1)",
    )
    p.add_argument(
        "--kv",
        choices=KV_MODES,
        default="exact",
        help="tree draft attention: exact (each node reads its ancestors, the EAGLE reference; "
        f"default) or sglang (stretch: {SGL}'s topk > 1 draft decode, where each beam row reads "
        f"its own row's earlier KV) to predict {SGL}'s logged number and what it costs",
    )
    p.add_argument(
        "--engine",
        type=engine_name,
        metavar="{vllm,sglang,llamacpp}",
        help=f"whose counting to follow ({LCPP}, {VLLM}, {SGL} in any spelling) (default vllm "
        "for a chain, sglang for a tree): all log "
        f"1 + accepted / rounds; {SGL}'s overlap scheduler runs and counts one more round after "
        f"a request's stop; {LCPP}'s llama-server drafts at most the tokens left before max "
        "tokens less one, and its last token is a plain decode (chains only)",
    )
    p.add_argument(
        "--sglang-overlap",
        choices=("on", "off"),
        default="on",
        help=f"{SGL}'s overlap scheduler (default on, as on GPUs; {SGLANG} forces it off "
        "for speculative decoding on CPU): off drops the round it runs after each request's "
        "stop, so a CPU run replays count for count",
    )


def add_early_stop_args(p: argparse.ArgumentParser) -> None:
    """llama.cpp's early stop of a chain (accept --live): `DraftSpec.p_min` / `n_min`."""
    p.add_argument(
        "--p-min",
        type=probability,
        default=0.0,
        metavar="P",
        help=f"--live: {LCPP}'s --spec-draft-p-min: a chain stops drafting at the first step "
        "whose top-1 probability (over the draft's top 10) is below P, that token dropped "
        "(default 0: off)",
    )
    p.add_argument(
        "--n-min",
        type=non_negative,
        default=0,
        metavar="N",
        help=f"--live: {LCPP}'s --spec-draft-n-min: a shorter draft is dropped whole (default 0)",
    )


# reconcile's --help description, beside its options
RECONCILE_DESCRIPTION = (
    f"Read what {VLLM} or {SGL} logged about speculative decoding ({VLLM}'s "
    "'SpecDecoding metrics' log lines, its Prometheus text, JSON lines of per-request "
    f"spec_decode_metrics, {SGL}'s 'accept len' lines, meta_info or server info), replay the "
    "same requests (SAMPLES captured with `capture --generate`, or --prompts INPUT --target "
    "T through the live loop) under the draft's configured wiring and the alternatives, and "
    "say whether the draft is what it is, the engine feeds it the wrong layers, or the "
    "engine falls short of the draft (an engine-side fault)."
)


def add_reconcile_args(p: argparse.ArgumentParser) -> None:
    """reconcile's own options (the model's are cli's)."""
    p.add_argument(
        "--sglang-overlap",
        choices=("auto", "on", "off"),
        default="auto",
        help=f"{SGL}'s overlap scheduler, which runs and counts one more round after each "
        f"request's stop: auto (default) is off where the log shows {SGL} on a CPU (its decode "
        f"lines say 'cpu graph'; {SGLANG} forces the scheduler off there) and on elsewhere",
    )
    p.add_argument(
        "--decode-log-interval",
        type=positive,
        metavar="N",
        help=f"{SGL}'s --decode-log-interval for a log that does not hold its start-up line "
        "(at 1 each 'accept len' line is one decode iteration: its counts are exact)",
    )
    p.add_argument(
        "--engine-log",
        required=True,
        action="append",
        metavar="FILE",
        help="the engine's log, Prometheus text, or per-request JSON lines; given again, each "
        "file is one run of the same draft (another backend or build), each held against the "
        "replay, and a run that departs from it while another equals it is its backend's or "
        "build's",
    )
    p.add_argument(
        "--wiring",
        action="append",
        metavar="W",
        help="wirings to hold the figure against, besides the configured one, the wiring "
        "search's and what an engine may be feeding (default the presets train, serve)",
    )
    p.add_argument(
        "--steps",
        type=positive,
        metavar="S",
        help="draft steps per round (default: as the log shows, else 3)",
    )
    p.add_argument("--topk", type=positive, default=1, metavar="K", help=f"{SGL}'s topk")
    p.add_argument("--draft-tokens", type=positive, metavar="N", help=f"{SGL}'s draft tokens")
    p.add_argument(
        "--max-new",
        type=positive,
        metavar="M",
        help="--prompts: tokens per request, the prefill's included (default: the longest "
        "output in the log, else 128)",
    )
    p.add_argument(
        "--engine-dtype",
        choices=("float32", "bfloat16", "float16"),
        default="float32",
        help="what the engine computed in (default float32: its figure must equal a replay's "
        "count for count); in bfloat16 or float16 near-ties move its output, and a figure "
        "within 8%% of one wiring's replay, and at least twice as near it as any other, is that "
        "wiring's",
    )
    p.add_argument("--limit", type=positive, metavar="N", help="only the first N samples")
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    add_sampling_args(p, when="--prompts")
    _add_reconcile_settings(p)


def _add_reconcile_settings(p: argparse.ArgumentParser) -> None:
    """How the engine drafted and verified, where its log cannot say (reconcile)."""
    p.add_argument(
        "--adaptive",
        action="store_true",
        help=f"the engine's draft length adapts ({VLLM} num_speculative_tokens_per_batch_size, "
        f"{SGL} --speculative-adaptive, {LCPP} --spec-draft-p-min > 0) and its log gives no "
        "per-step drafted counts: the replay at a fixed K is an upper bound of its figure "
        "(found in the log's start-up lines where it holds them)",
    )
    p.add_argument(
        "--synthetic-rates",
        type=rates,
        metavar="R1,R2,...",
        help=f"{VLLM} ran rejection_sample_method='synthetic' with these "
        "synthetic_acceptance_rates (unconditional, per position): a figure they give is named "
        "as such, never blamed on the draft",
    )
    p.add_argument(
        "--simulated-accept-len",
        type=float,
        metavar="X",
        help=f"{SGL} ran with SGLANG_SIMULATE_ACC_LEN=X (its default match-expected method): a "
        "figure it gives is named as such, never blamed on the draft",
    )


def probability(text: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: not a number") from None
    if not 0.0 <= x <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r}: a probability is 0..1")
    return x


def rates(text: str) -> tuple[float, ...]:
    """R1,R2,...: per-position rates, each a probability."""
    return tuple(probability(x.strip()) for x in text.split(",") if x.strip())


def add_sampling_args(
    p: argparse.ArgumentParser,
    when: str = "--live",
    *,
    seed: bool = True,
    verification: bool = True,
) -> None:
    """The requests' sampling and the engine's verification rule (the live loop's: `when` names
    the flag that runs it, accept's --live or reconcile's --prompts; seed: whether it draws;
    verification: whether the rule and its thresholds are asked, or follow the engine)."""
    from inspector.serving.sampling_settings import RULES

    p.add_argument(
        "--temperature", type=float, default=0.0, help=f"{when}: 0 = greedy (default); > 0 samples"
    )
    p.add_argument(
        "--top-k", type=non_negative, default=0, metavar="K", help=f"{when}: top-k (default 0: off)"
    )
    p.add_argument(
        "--top-p", type=float, default=1.0, metavar="P", help=f"{when}: top-p (default 1: off)"
    )
    if seed:
        p.add_argument("--seed", type=int, default=0, help=f"{when}: seed for --temperature")
    if not verification:
        return
    p.add_argument(
        "--verify",
        choices=RULES,
        help=f"{when} at a temperature: the engine's verification rule (default its own: "
        + ", ".join(f"{e.default_verify} for {e.display}" for e in map(serving_engine, SERVING))
        + "; the -probabilistic / -rejection "
        "rules sample the chain from the draft's q)",
    )
    p.add_argument(
        "--threshold-single",
        type=float,
        default=1.0,
        metavar="T",
        help="sglang-target-only: --speculative-accept-threshold-single (default 1: lossless)",
    )
    p.add_argument(
        "--threshold-acc",
        type=float,
        default=1.0,
        metavar="T",
        help="sglang-target-only: --speculative-accept-threshold-acc (default 1: lossless)",
    )


def expectation_settings(args: argparse.Namespace, engine, chain: bool):
    """The SamplingSettings an expectation on saved samples runs under (--temperature, --top-k,
    --top-p, --verify and the thresholds; `SamplingSettings.on_samples` says which rules)."""
    from inspector.serving.sampling_settings import Sampling, SamplingSettings

    sampling = Sampling(args.temperature, args.top_k, args.top_p)
    return SamplingSettings.on_samples(sampling, verification_from_args(args, engine), chain=chain)


def verification_from_args(args: argparse.Namespace, engine):
    """The Verification the flags ask for, under `engine` (its default rule when unnamed)."""
    from inspector.serving.sampling_settings import Verification, parse_rule

    return Verification(
        parse_rule(args.verify, engine.value), args.threshold_single, args.threshold_acc
    )


def add_compare_parser(sub: argparse._SubParsersAction) -> None:
    from inspector.stats.bootstrap import DEFAULT_RESAMPLES

    p = sub.add_parser(
        "compare",
        help="two drafts' accept lengths on the same samples, B - A with a paired bootstrap "
        "interval, by depth and context",
        description="Replay CKPT_A and CKPT_B over the same SAMPLES under the same engine "
        "settings (as `accept`), and report each draft's accept length (1 + accepted / rounds), "
        "B - A with a paired bootstrap percentile interval over the requests, the difference at "
        "each draft depth and per context bucket, and the round starts where one draft accepts "
        "more than the other.",
    )
    p.add_argument("checkpoint", metavar="CKPT_A", help="draft checkpoint folder A")
    p.add_argument("checkpoint_b", metavar="CKPT_B", help="draft checkpoint folder B")
    p.add_argument(
        "samples", nargs="+", metavar="SAMPLES", help="sample folder(s), glob(s), file(s)"
    )
    p.add_argument("--target", metavar="DIR", help="target model folder (as for accept)")
    p.add_argument(
        "--embed", metavar="FILE", help="safetensors file holding model.embed_tokens.weight"
    )
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N (default auto)")
    p.add_argument(
        "--dtype", default="auto", help="auto (as stored) | float32 | bfloat16 | float16"
    )
    p.add_argument(
        "--memory-budget", metavar="SIZE", help="memory the caches may keep (as for accept)"
    )
    p.add_argument(
        "--slot-layers", metavar="IDS", help="HF hidden_states index of every slot (as for accept)"
    )
    p.add_argument("--wiring-a", default="train", metavar="W", help="A's wiring (default train)")
    p.add_argument("--wiring-b", default="train", metavar="W", help="B's wiring (default train)")
    add_engine_args(p)
    p.add_argument("--limit", type=positive, metavar="N", help="compare on the first N samples")
    p.add_argument(
        "--report",
        metavar="FILE",
        help="also write a self-contained report (FILE.md or FILE.html): the tables, the "
        "settings, the inputs' fingerprints",
    )
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    p.add_argument("--seed", type=non_negative, default=0, help="the bootstrap's seed (default 0)")
    p.add_argument(
        "--resamples",
        type=positive,
        default=DEFAULT_RESAMPLES,
        metavar="R",
        help=f"bootstrap resamples of the requests (default {DEFAULT_RESAMPLES}; 95%% interval)",
    )
    p.add_argument(
        "--fail-under",
        type=float,
        metavar="X",
        help=f"exit {EXIT_GATE} (one line on stderr) when B's accept length is below A's by more "
        "than X (B - A < -X)",
    )
    p.set_defaults(prompts=None)
