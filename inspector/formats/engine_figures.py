"""The figures an engine reported, as `engine_log` reads them from any of its files: the pooled
counts, each request's, and the build that logged them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from inspector.engines import Engine, engine_words


@dataclass
class RequestFigures:
    """One request's figures as the engine reported them."""

    where: str  # "file:line"
    line: int = 0  # the entry's line in the file: the log's order
    prompt_ids: list[int] | None = None
    output_ids: list[int] | None = None
    per_step_accepted: list[int] | None = None  # vLLM: each round's accepted count
    # each round's drafted count, where the log gives it (vLLM's "detailed" per-request
    # metrics): the engine's own schedule, which the replay then drafts. A 0 marks a round that
    # drafted nothing (vLLM leaves such rounds out; a log that keeps them places them): no draft
    per_step_drafted: list[int] | None = None
    spec_tokens: int | None = None  # vLLM's num_spec_tokens (the configured k), where given
    rounds: int | None = None  # verification rounds (SGLang: spec_verify_ct)
    accepted: int | None = None  # drafted tokens accepted over the request
    completion_tokens: int | None = None  # SGLang: the prefill's token included
    drafted_tokens: int | None = None  # llama.cpp's timings.draft_n: tokens drafted
    spec_accept_length: float | None = None  # SGLang's per-request figure, as logged
    # `accepted` is completion_tokens - rounds: the log's figure is SGLang's per-request
    # spec_accept_length, not the accept length its log lines pool
    per_request_figure: bool = False

    @property
    def counted_accepted(self) -> list[int] | None:
        """per_step_accepted of the rounds that drafted (the engine's counts: a round that
        drafted nothing is no draft)."""
        if self.per_step_accepted is None or self.per_step_drafted is None:
            return self.per_step_accepted
        return [a for a, d in zip(self.per_step_accepted, self.per_step_drafted, strict=True) if d]


@dataclass(frozen=True)
class WindowFigures:
    """One windowed log line (SGLang's "accept len: X" over decode_log_interval decode
    iterations), as printed: the figure and the batch size of the window's last iteration."""

    where: str  # "file:line"
    line: int
    text: str  # the accept len as printed ("1.00")
    running: int | None  # #running-req (None: the line states none)

    @property
    def accept_length(self) -> float:
        return float(self.text)


@dataclass(frozen=True)
class EngineStart:
    """The engine's build and speculative config, as its start-up lines state them."""

    where: str  # "file:line"
    version: str  # "0.32.0" (a local suffix such as "+cpu" dropped); llama.cpp: "b7000"
    # the device or backend: vLLM's device_config ("cpu", "cuda"), llama.cpp's backend as its
    # device names say it ("CUDA", "Vulkan", "ROCm", ...)
    device: str | None = None
    method: str | None = None  # "eagle3", ...
    draft: str | None = None  # the draft model's path or name
    spec_tokens: int | None = None  # num_speculative_tokens
    engine: Engine = Engine.VLLM  # whose start-up lines (vLLM's were the first read)
    commit: str | None = None  # the build's commit, where its lines state one (llama.cpp)

    @property
    def label(self) -> str:
        """How a report names the build: vLLM 0.32.0 on cpu, llama.cpp b7000 (abc1234) on CUDA."""
        commit = f" ({self.commit})" if self.commit else ""
        on = f" on {self.device}" if self.device else ""
        version = f" {self.version}" if self.version else ""
        return f"{engine_words(self.engine)}{version}{commit}{on}"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["engine"] = Engine(self.engine).value
        return d


@dataclass
class EngineLog:
    """The figures one file holds. Counts are None where the source gives none (a log line's
    rounded mean, SGLang's windows)."""

    path: Path
    engine: Engine
    source: str  # "log" | "prometheus" | "requests" | "server-info"
    accept_length: float | None = None
    rounds: int | None = None
    accepted: int | None = None
    drafted_tokens: int | None = None
    accepted_per_pos: list[int] | None = None
    steps: int | None = None  # drafted tokens per round (vLLM's k), where the source shows it
    lines: int = 0  # log lines or entries read
    rounded: bool = False  # accept_length is a rounded figure (2 decimals), not counts
    # "accept_length" (1 + accepted / rounds) or, for SGLang requests without a count of correct
    # drafts, "spec_accept_length" (completion tokens / verify rounds, pooled)
    figure: str = "accept_length"
    requests: list[RequestFigures] = field(default_factory=list)
    # the engine's start-up lines, where the log holds them (several: it was restarted)
    starts: list[EngineStart] = field(default_factory=list)
    # a windowed log's lines in the log's order (SGLang's decode lines): where the figure fell
    windows: list[WindowFigures] = field(default_factory=list)
    # SGLang's log lines: how they were pooled ("running-req": weighted by #running-req as the
    # engine pools them; "unweighted": some line states no #running-req), the decode iterations
    # a line covers where known, and a sentence saying how exact the figure is
    weighting: str | None = None
    decode_log_interval: int | None = None
    note: str | None = None
    # where the engine ran, as its lines show it (SGLang's decode lines say "cpu graph" on a CPU,
    # "cuda graph" on a GPU): SGLang runs no overlap scheduler for speculative decoding on CPU
    device: str | None = None
    # why the engine's draft length adapts, where its log says so (a sentence naming the line;
    # None: the log says nothing of it): a fixed-K replay is then an upper bound, not an equal
    adaptive: str | None = None

    @property
    def schedules(self) -> bool:
        """Whether the requests give each round's drafted count (the engine's schedule)."""
        return bool(self.requests) and all(r.per_step_drafted is not None for r in self.requests)

    @property
    def most_drafted(self) -> int | None:
        """The most tokens any logged round drafted (None: no request gives its schedule)."""
        counts = [d for r in self.requests for d in r.per_step_drafted or []]
        return max(counts) if counts else None

    @property
    def start(self) -> EngineStart | None:
        """The build that logged the figures: one start-up, or several of the same build and
        speculative config (None where none is logged, or the log mixes builds)."""
        if not self.starts:
            return None
        first = self.starts[0]
        same = all(
            (s.version, s.commit, s.device, s.method, s.spec_tokens)
            == (first.version, first.commit, first.device, first.method, first.spec_tokens)
            for s in self.starts
        )
        return first if same else None

    @property
    def description(self) -> str:
        what = {
            "log": "log line" if self.lines == 1 else "log lines",
            "prometheus": "Prometheus counters",
            "requests": "requests",
            "server-info": "server info",
        }[self.source]
        n = f"{self.lines} " if self.source in ("log", "requests") else ""
        how = {"running-req": " by #running-req", "unweighted": " unweighted"}.get(
            self.weighting or "", ""
        )
        return f"{engine_words(self.engine)} {n}{what}{how}"
