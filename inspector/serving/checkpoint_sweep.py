"""Every checkpoint of a training run over the same samples: the accept length an engine would
log for each (exact, the replay's), its step accuracies and the trainers' own metrics, the best
by accept length, and how far the last one is from it.

The samples are read once: one `SampleSet` (its byte-bounded cache) serves every checkpoint's
evaluator, so a sweep of N checkpoints costs about N replays plus one read of the data (N reads
where the set does not fit the cache). A chain under vLLM's counting takes its accept length from
the evaluation's own chain replay (the TTT predictions it already computed); other settings run
the replay besides.

Resumable: each finished checkpoint's result goes to a JSON-lines state file, keyed by the
checkpoint's files (paths, sizes, modification times), the samples' and the settings; a rerun
reads it and evaluates only what is new or changed. Under torchrun each rank runs its share of
the checkpoints (`distributed.merge_sweep` puts them back in order) and appends to the same
state file.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from inspector.engines import Engine
from inspector.errors import InputError
from inspector.formats.run_dir import RunCheckpoint
from inspector.serving.spec import EXACT_KV, DraftSpec

if TYPE_CHECKING:
    import torch

    from inspector.draft import Draft
    from inspector.evaluate import Evaluator
    from inspector.evaluate.report import WiringReport
    from inspector.formats import SampleSet, TargetHead
    from inspector.metrics.rounds import AcceptStats

SCHEMA_VERSION = 1


@dataclass
class CheckpointResult:
    """One checkpoint's figures (a row of the sweep)."""

    name: str
    path: str
    step: int | None
    accept_length: float | None
    is_bound: bool
    rounds: int
    accepted: int
    per_depth: list[float]
    step_acc: list[float | None]  # ours: all-tok accuracy per TTT step
    cond_acc: list[float | None]  # ours: P(step k right | steps < k right)
    estimate: float  # the closed form 1 + sum_k prod cond (what trainers log)
    trainer: dict = field(default_factory=dict)  # the trainers' own per-step figures (--target)
    note: str | None = None
    seconds: float = 0.0
    resumed: bool = False

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("resumed")
        return d

    @classmethod
    def from_dict(cls, d: dict) -> CheckpointResult:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d and k != "resumed"})


@dataclass
class SweepRunReport:
    run_dir: str
    spec: DraftSpec
    engine: Engine
    wiring: str
    samples: int
    results: list[CheckpointResult]
    refused: list[tuple[str, str]]  # (folder, why)
    state: str | None = None

    @property
    def best(self) -> CheckpointResult | None:
        scored = [r for r in self.results if r.accept_length is not None]
        # the earliest of equal bests: the cheaper checkpoint to ship
        return max(scored, key=lambda r: (r.accept_length, -self.results.index(r)), default=None)

    @property
    def last(self) -> CheckpointResult | None:
        return self.results[-1] if self.results else None

    @property
    def last_behind_best(self) -> float | None:
        """best - last accept length (0 when the last is the best)."""
        b, last = self.best, self.last
        if b is None or last is None or last.accept_length is None or b.accept_length is None:
            return None
        return b.accept_length - last.accept_length

    def to_dict(self) -> dict:
        best = self.best
        return {
            "schema_version": SCHEMA_VERSION,
            "run_dir": self.run_dir,
            "config": {**self.spec.to_dict(), "mode": "replay", "engine": self.engine.value},
            "wiring": self.wiring,
            "samples": self.samples,
            "checkpoints": [r.to_dict() for r in self.results],
            "best": None if best is None else best.name,
            "best_accept_length": None if best is None else best.accept_length,
            "last_behind_best": self.last_behind_best,
            "refused": [{"path": p, "why": w} for p, w in self.refused],
            "state": self.state,
        }


def _files_key(folder: Path) -> list:
    out = []
    for f in sorted(folder.iterdir()):
        if f.is_file() and (f.suffix in (".json", ".safetensors")):
            st = f.stat()
            out.append([f.name, st.st_size, st.st_mtime_ns])
    return out


def checkpoint_key(ckpt: RunCheckpoint, settings: dict) -> str:
    """What a finished result is valid for: the checkpoint's files and the sweep's settings."""
    doc = {"path": str(ckpt.path.resolve()), "files": _files_key(ckpt.path), **settings}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def read_state(path: Path) -> dict[str, dict]:
    """{key: result dict} from a state file (a line that does not parse is skipped: a run
    killed mid-write leaves at most its last line half-written)."""
    out: dict[str, dict] = {}
    if not path.is_file():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            d = json.loads(line)
            out[str(d["key"])] = dict(d["result"])
        except (ValueError, KeyError, TypeError):
            continue
    return out


def _append_state(path: Path, key: str, result: CheckpointResult) -> None:
    """One line per finished checkpoint, under an exclusive lock: the ranks of a torchrun sweep
    append to the same file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps({"key": key, "result": result.to_dict()}) + "\n"
    with open(path, "a", encoding="utf-8") as f:
        try:
            import fcntl
        except ImportError:  # not POSIX: one process per file is the caller's business
            f.write(line)
            return
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            f.write(line)
            f.flush()
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _counts_acc(c) -> float | None:
    return None if c is None or not c.total else c.acc


def _trainer(steps) -> dict:
    out: dict = {}
    if steps and steps[0].spec_full is not None:
        out["speculators_full_acc"] = [_counts_acc(s.spec_full) for s in steps]
        out["speculators_cond_acc"] = [_counts_acc(s.spec_cond) for s in steps]
    if steps and steps[0].specforge is not None:
        out["specforge_acc"] = [_counts_acc(s.specforge) for s in steps]
    return out


def evaluate_checkpoint(
    ev, spec: DraftSpec, engine: Engine, wiring_text: str, limit, overlap: bool = True
):
    """(accept stats, the wiring report) of one loaded evaluator; `overlap`: SGLang's overlap
    scheduler counts its round after each request's stop (`AcceptReport.without_overlap_rounds`)."""
    from inspector.serving.replay import Replayer
    from inspector.wiring import preset_name

    w = ev.wiring(wiring_text)
    report = ev.run([w], limit=limit, names=[preset_name(wiring_text)])
    wr = report.wirings[0]
    # eval's accept column walks the rounds as an engine without overlap or caps counts them
    if spec.is_chain and engine.spec.plain_rounds and spec.kv == EXACT_KV and wr.accept is not None:
        return wr.accept, wr, report
    rep = Replayer(ev, spec, engine).run([w], limit=limit, names=[preset_name(wiring_text)])
    if engine.overlap_round and not overlap:
        rep = rep.without_overlap_rounds()
    return rep.wirings[0].stats, wr, report


@dataclass(frozen=True)
class SweepSettings:
    """What every checkpoint of a sweep is evaluated under: the drafting and the engine's
    counting, the wiring, the target (its head for the trainers' metrics, its layer count), the
    device and dtype, the samples' limit, the state file (None: no resume) and whether SGLang's
    overlap round is counted. All but the device and the state file key a finished result."""

    spec: DraftSpec
    engine: Engine
    wiring: str = "train"
    target: str | Path | None = None
    device: str = "cpu"
    dtype: str = "auto"
    limit: int | None = None
    state: Path | None = None
    overlap: bool = True

    def key_fields(self, samples: Sequence[str]) -> dict:
        """The settings a finished result is valid for (`checkpoint_key`), the samples with them."""
        return {
            "spec": self.spec.to_dict(),
            "engine": self.engine.value,
            "wiring": self.wiring,
            "samples": [str(Path(s).resolve()) for s in samples],
            "limit": self.limit,
            "target": str(Path(self.target).resolve()) if self.target is not None else None,
            "dtype": self.dtype,
            "schema": SCHEMA_VERSION,
            **({} if self.overlap else {"sglang_overlap": False}),
        }


def sweep_run(
    checkpoints: Sequence[RunCheckpoint],
    samples: Sequence[str],
    settings: SweepSettings,
    *,
    progress: Callable[[int, int], None] | None = None,
    refused: Sequence[tuple[Path, str]] = (),
    check: Callable[[Evaluator], str | None] | None = None,
) -> SweepRunReport:
    """Evaluate every checkpoint in order (module docstring); a checkpoint that does not load
    is refused in one line and the rest still run.

    refused: the run folder's checkpoints refused before the sweep (kept first in the report).
    check: a note on each checkpoint's evaluator (the command's: whether its config names the
    wiring its weights fit best), kept in the checkpoint's result."""
    from inspector.evaluate import resolve_device

    sweep = _Sweep(settings, samples, resolve_device(settings.device), check)
    key_fields = settings.key_fields(samples)
    done = read_state(settings.state) if settings.state is not None else {}
    results: list[CheckpointResult] = []
    out_refused = [(str(p), why) for p, why in refused]
    n_samples = 0
    for k, ckpt in enumerate(checkpoints):
        key = checkpoint_key(ckpt, key_fields)
        if key in done:
            results.append(_resumed(done[key]))
        else:
            try:
                r, n = sweep.evaluate(ckpt)
            except InputError as e:
                out_refused.append((str(ckpt.path), str(e)))
            else:
                n_samples = max(n_samples, n)
                results.append(r)
                if settings.state is not None:
                    _append_state(settings.state, key, r)
        if progress is not None:
            progress(k + 1, len(checkpoints))
    return SweepRunReport(
        run_dir="",
        spec=settings.spec,
        engine=settings.engine,
        wiring=settings.wiring,
        samples=n_samples,
        results=results,
        refused=out_refused,
        state=str(settings.state) if settings.state is not None else None,
    )


def _resumed(d: dict) -> CheckpointResult:
    """A result the state file holds for this checkpoint under these settings: not rerun."""
    r = CheckpointResult.from_dict(d)
    r.resumed = True
    return r


@dataclass(frozen=True)
class _FirstVocab:
    """The run's first loaded checkpoint, which the later ones' vocabularies are held to."""

    name: str
    d2t: torch.Tensor
    layout: str
    path: Path


class _Sweep:
    """What a sweep shares across its checkpoints: the samples, read once (one `SampleSet` and its
    cache serve every checkpoint's evaluator) when the first checkpoint loads, the target's head,
    and that first checkpoint's vocabulary."""

    def __init__(
        self,
        settings: SweepSettings,
        samples: Sequence[str],
        device: str,
        check: Callable[[Evaluator], str | None] | None,
    ) -> None:
        self.s, self.samples, self.dev, self.check = settings, samples, device, check
        self.sample_set: SampleSet | None = None
        self.head: TargetHead | None = None
        self.first: _FirstVocab | None = None

    def evaluate(self, ckpt: RunCheckpoint) -> tuple[CheckpointResult, int]:
        """One checkpoint's row and the samples it read; InputError where it does not load or
        does not fit the run's samples."""
        from inspector.evaluate import Evaluator
        from inspector.formats import load_draft

        s = self.s
        t0 = time.perf_counter()
        draft = load_draft(ckpt.path, target=s.target, dtype=s.dtype, device=self.dev)
        sample_set = self._samples_for(draft, ckpt)
        notes = self._vocab_notes(draft, ckpt)
        ev = Evaluator(
            draft,
            sample_set,
            ttt_steps=s.spec.steps if s.spec.is_chain else 1,
            target_head=None if self.head is None else self.head.to(self.dev, draft.dtype),
        )
        checked = self.check(ev) if self.check is not None else None
        if checked:
            notes.append(checked)
        note = "; ".join(notes) or None
        stats, wr, report = evaluate_checkpoint(ev, s.spec, s.engine, s.wiring, s.limit, s.overlap)
        return _result(ckpt, stats, wr, note, round(time.perf_counter() - t0, 3)), report.samples

    def _samples_for(self, draft: Draft, ckpt: RunCheckpoint) -> SampleSet:
        """The run's samples: opened by the first checkpoint that loads (with the target's head),
        refused to a later one whose vocabulary or target hidden size differs."""
        from inspector.formats import SampleSet, read_target_head
        from inspector.formats.layer_convention import target_layer_count

        cfg, target = draft.config, self.s.target
        if self.sample_set is None:
            n_layers = target_layer_count(target) if target is not None else None
            self.sample_set = SampleSet(
                list(self.samples),
                vocab_size=cfg.vocab_size,
                hidden_size=cfg.target_hidden_size,
                num_layers=n_layers,
            )
            if target is not None:
                self.head = read_target_head(
                    target, vocab_size=cfg.vocab_size, hidden_size=cfg.target_hidden_size
                )
            d2t = draft.vocab.draft_to_target.cpu()
            self.first = _FirstVocab(ckpt.name, d2t, draft.layout, ckpt.path)
        elif (cfg.vocab_size, cfg.target_hidden_size) != (
            self.sample_set.vocab_size,
            self.sample_set.hidden_size,
        ):
            raise InputError(
                ckpt.path / "config.json",
                "vocab_size",
                f"vocab {cfg.vocab_size} / target hidden {cfg.target_hidden_size}: the run's "
                f"first checkpoint has {self.sample_set.vocab_size} / {self.sample_set.hidden_size}",
            )
        return self.sample_set

    def _vocab_notes(self, draft: Draft, ckpt: RunCheckpoint) -> list[str]:
        """Where this checkpoint's layout or vocabulary map departs from the run's first: it is
        evaluated all the same, and the note says so."""
        first = self.first
        assert first is not None
        notes = []
        if draft.layout != first.layout:
            notes.append(
                f"its layout is {draft.layout}, {first.name}'s {first.layout} (read by "
                "its own adapter: evaluated all the same)"
            )
        d2t = draft.vocab.draft_to_target.cpu()
        if d2t.shape != first.d2t.shape:
            notes.append(
                f"its draft vocabulary ({d2t.numel()} tokens) is not {first.name}'s "
                f"({first.d2t.numel()}): evaluated all the same"
            )
        elif not bool((d2t == first.d2t).all()):
            moved = int((d2t != first.d2t).sum())
            notes.append(
                f"its vocab map (d2t) moved against {first.name}'s: {moved} of "
                f"{d2t.numel()} draft rows map to other target tokens, evaluated all the "
                f"same (`eagle-inspect doctor {ckpt.path} SAMPLES --parent {first.path}` "
                "says whether its head followed)"
            )
        return notes


def _result(
    ckpt: RunCheckpoint, stats: AcceptStats, wr: WiringReport, note: str | None, seconds: float
) -> CheckpointResult:
    """A checkpoint's row: the engine's accept length (the replay's), our step accuracies, the
    trainers' closed form and their own metrics."""
    return CheckpointResult(
        ckpt.name,
        str(ckpt.path),
        ckpt.step,
        stats.accept_length,
        stats.is_bound,
        stats.rounds,
        stats.accepted,
        [float(x) for x in stats.per_depth],
        [s.all_tok.acc if s.all_tok.total else None for s in wr.steps],
        [s.cond.acc if s.cond.total else None for s in wr.steps],
        wr.acceptance_length_estimate,
        _trainer(wr.steps),
        note,
        seconds,
    )
