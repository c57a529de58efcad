"""What `reconcile` is asked (`ReconcileRequest`: the settings a view takes, typed), how its inputs
load (`ReconcileLoad`: the view's loaders), what it tells while it runs (`ReconcileHooks`: the notes
and the progress), and the checks of the settings against the engine's logs. A leaf of the
reconcile run: `replays` and `entry` read it, it reads neither.

Errors about a setting name it with `setting_field` ("topk"); the CLI words it as its flag
(`--topk`), so a message reads as it did when the command raised it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from inspector.errors import InputError, setting_field
from inspector.progress import Progress, StageProgress

if TYPE_CHECKING:
    from inspector.doctor.reconcile.synthetic import SyntheticSetting
    from inspector.engines import Engine
    from inspector.evaluate import Evaluator
    from inspector.formats.engine_log import EngineLog
    from inspector.serving.spec import DraftSpec

DEFAULT_MAX_NEW = 128  # tokens per live request where neither --max-new nor the log says


@dataclass(frozen=True)
class ReconcileRequest:
    """The settings of one reconcile of an EAGLE-3 draft (a block draft's is `block`'s).

    engine_logs: each one run of the same draft (the engine's log, Prometheus text or per-request
      JSON lines); decode_log_interval: the log interval of an engine log that does not state it.
    samples: the samples as given (SAMPLES); prompts: the engine's requests as given (--prompts):
      set, the live loop reruns them against the target (where `ReconcileLoad.live` finds both).
    steps, topk, draft_tokens: the draft length (None: as the log shows, else the default), the
      tree's branching and its draft tokens.
    wiring: wirings to hold the figure against besides the candidates (None: the presets).
    limit: only the first N samples or prompts. device: where the draft runs.
    engine_dtype: what the engine computed in; adaptive: its draft length adapts.
    synthetic_rates / simulated_accept_len: the engine's synthetic acceptance (one of them).
    overlap: whether the overlap scheduler ran ("on", "off"; "auto": as the log's device says).
    max_new, dtype, temperature, top_k, top_p, seed, verify, threshold_single, threshold_acc:
      the live loop's requests (tokens each, None: the log's longest output), the target's dtype
      and the sampling and verification rule (`verify` None: the engine's default).
    """

    engine_logs: tuple[str | Path, ...]
    samples: tuple[str, ...] = ()
    prompts: str | None = None
    decode_log_interval: int | None = None
    steps: int | None = None
    topk: int = 1
    draft_tokens: int | None = None
    wiring: tuple[str, ...] | None = None
    limit: int | None = None
    device: str = "auto"
    engine_dtype: str = "float32"
    adaptive: bool = False
    synthetic_rates: tuple[float, ...] | None = None
    simulated_accept_len: float | None = None
    overlap: str = "auto"
    max_new: int | None = None
    dtype: str = "auto"
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    verify: str | None = None
    threshold_single: float = 1.0
    threshold_acc: float = 1.0


@dataclass(frozen=True)
class LoadedSamples:
    """The evaluator over the draft and SAMPLES, and the target folder the inputs name (None)."""

    evaluator: Evaluator
    target: Path | None


@dataclass(frozen=True)
class LivePaths:
    """The live loop's inputs: the draft's folder, the target's, the prompts."""

    draft: Path
    target: Path
    prompts: Path


class ReconcileLoad(Protocol):
    """The view's loaders, called where the run needs them (a failure there comes after the notes
    before it, as it always has): the inputs are resolved by the view and the session."""

    def samples(self, device: str, ttt_steps: int) -> LoadedSamples:
        """The evaluator over the draft and SAMPLES on `device`, `ttt_steps` steps."""
        ...

    def live(self) -> LivePaths:
        """The draft, target and prompts the live loop runs."""
        ...


def _no_bar(label: str) -> AbstractContextManager[Progress | None]:
    return nullcontext(None)


def _no_stages() -> AbstractContextManager[StageProgress | None]:
    return nullcontext(None)


@dataclass(frozen=True)
class ReconcileHooks:
    """What the run tells while it runs: `note(line)` for each note (the CLI prints "note: line"
    on stderr), `bar(label)` around each long pass (a `Progress` callback), `stages()` around the
    wiring search (a `StageProgress` callback)."""

    note: Callable[[str], None] = lambda line: None
    bar: Callable[[str], AbstractContextManager[Progress | None]] = _no_bar
    stages: Callable[[], AbstractContextManager[StageProgress | None]] = _no_stages


def engine_flags(spec: DraftSpec, engine: Engine) -> str:
    """The engine's own flags for these draft settings."""
    flag = engine.spec.steps_flag
    return f"{engine.display} {flag} {spec.steps}" if flag else spec.flags()


def same_engine(logs: Sequence[EngineLog], prompts: str | None) -> None:
    """Several runs are one engine's (its replay counts rounds as that engine does), replayed
    from samples."""
    if len(logs) < 2:
        return
    from inspector.engines import engine_words

    named = list(dict.fromkeys(engine_words(lg.engine) for lg in logs))
    if len(named) > 1:
        raise InputError(
            None,
            setting_field("engine-log"),
            f"the logs are {' and '.join(named)}'s: several runs are compared under one "
            "engine's replay (each engine counts its rounds its own way); reconcile each "
            "engine's runs apart",
        )
    if prompts:
        raise InputError(
            None,
            setting_field("prompts"),
            "one --engine-log with --prompts (several runs replay from SAMPLES)",
        )


def check_steps(log: EngineLog, given: int | None, steps: int) -> None:
    """The log's own draft length against --steps (or the first log's)."""
    if log.steps is not None and steps != log.steps:
        raise InputError(
            log.path,
            "num_spec_tokens" if log.source == "requests" else "Per-position acceptance rate",
            f"the engine drafted {log.steps} tokens a round, "
            + (f"--steps says {given}" if given else f"another log's {steps}"),
        )
    if log.most_drafted is not None and steps < log.most_drafted:
        raise InputError(
            log.path,
            "per_step_drafted",
            f"a round drafted {log.most_drafted} tokens, --steps says {steps}",
        )


def synthetic_setting(request: ReconcileRequest) -> SyntheticSetting | None:
    """The synthetic-acceptance setting the request names (None: none)."""
    from inspector.doctor.reconcile.synthetic import SyntheticSetting
    from inspector.engines import Engine

    rates, length = request.synthetic_rates, request.simulated_accept_len
    if rates is not None and length is not None:
        raise InputError(
            None,
            setting_field("synthetic-rates"),
            f"{Engine.VLLM.display}'s; --simulated-accept-len is {Engine.SGLANG.display}'s: one "
            "of them",
        )
    if rates is not None:
        return SyntheticSetting.vllm(rates)
    if length is not None:
        return SyntheticSetting.sglang(length)
    return None


def overlap_ran(setting: str, log: EngineLog) -> bool:
    """Whether SGLang's overlap scheduler ran: as `setting` says ("on", "off"), or (auto) off where
    the log shows SGLang on a CPU (SGLang 0.5.23 srt/arg_groups/speculative_hook.py forces it off
    for speculative decoding there) and on elsewhere."""
    if setting != "auto":
        return setting == "on"
    return log.device != "cpu"


def chains_only(spec: DraftSpec, engine: Engine) -> None:
    """An engine that drafts chains logs no tree: --topk 1 for its log."""
    if not engine.spec.trees and not spec.is_chain:
        raise InputError(
            None,
            setting_field("topk"),
            f"{engine.display} drafts chains: --topk 1 for a {engine.display} log",
        )
