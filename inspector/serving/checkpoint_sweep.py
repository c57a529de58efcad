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
    from inspector.evaluate import Evaluator

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


def sweep_run(
    checkpoints: Sequence[RunCheckpoint],
    samples: Sequence[str],
    spec: DraftSpec,
    engine: Engine,
    *,
    wiring: str = "train",
    target: str | Path | None = None,
    device: str = "cpu",
    dtype: str = "auto",
    limit: int | None = None,
    state: Path | None = None,
    progress: Callable[[int, int], None] | None = None,
    refused: Sequence[tuple[Path, str]] = (),
    check: Callable[[Evaluator], str | None] | None = None,
    overlap: bool = True,
) -> SweepRunReport:
    """Evaluate every checkpoint in order (module docstring); a checkpoint that does not load
    is refused in one line and the rest still run.

    check: a note on each checkpoint's evaluator (the command's: whether its config names the
    wiring its weights fit best), kept in the checkpoint's result."""
    from inspector.evaluate import Evaluator, resolve_device
    from inspector.formats import SampleSet, load_draft, read_target_head
    from inspector.formats.layer_convention import target_layer_count

    dev = resolve_device(device)
    settings = {
        "spec": spec.to_dict(),
        "engine": engine.value,
        "wiring": wiring,
        "samples": [str(Path(s).resolve()) for s in samples],
        "limit": limit,
        "target": str(Path(target).resolve()) if target is not None else None,
        "dtype": dtype,
        "schema": SCHEMA_VERSION,
        **({} if overlap else {"sglang_overlap": False}),
    }
    done = read_state(state) if state is not None else {}
    results: list[CheckpointResult] = []
    out_refused = [(str(p), why) for p, why in refused]
    sample_set = None
    head = None
    first_vocab = None
    n_samples = 0
    ttt = spec.steps if spec.is_chain else 1
    for k, ckpt in enumerate(checkpoints):
        key = checkpoint_key(ckpt, settings)
        if key in done:
            r = CheckpointResult.from_dict(done[key])
            r.resumed = True
            results.append(r)
            if progress is not None:
                progress(k + 1, len(checkpoints))
            continue
        t0 = time.perf_counter()
        try:
            draft = load_draft(ckpt.path, target=target, dtype=dtype, device=dev)
            cfg = draft.config
            if sample_set is None:
                n_layers = target_layer_count(target) if target is not None else None
                sample_set = SampleSet(
                    list(samples),
                    vocab_size=cfg.vocab_size,
                    hidden_size=cfg.target_hidden_size,
                    num_layers=n_layers,
                )
                if target is not None:
                    head = read_target_head(
                        target, vocab_size=cfg.vocab_size, hidden_size=cfg.target_hidden_size
                    )
                first_vocab = (
                    ckpt.name,
                    draft.vocab.draft_to_target.cpu(),
                    draft.layout,
                    ckpt.path,
                )
            elif (cfg.vocab_size, cfg.target_hidden_size) != (
                sample_set.vocab_size,
                sample_set.hidden_size,
            ):
                raise InputError(
                    ckpt.path / "config.json",
                    "vocab_size",
                    f"vocab {cfg.vocab_size} / target hidden {cfg.target_hidden_size}: the run's "
                    f"first checkpoint has {sample_set.vocab_size} / {sample_set.hidden_size}",
                )
            assert first_vocab is not None
            notes = []
            if draft.layout != first_vocab[2]:
                notes.append(
                    f"its layout is {draft.layout}, {first_vocab[0]}'s {first_vocab[2]} (read by "
                    "its own adapter: evaluated all the same)"
                )
            d2t = draft.vocab.draft_to_target.cpu()
            if d2t.shape != first_vocab[1].shape:
                notes.append(
                    f"its draft vocabulary ({d2t.numel()} tokens) is not {first_vocab[0]}'s "
                    f"({first_vocab[1].numel()}): evaluated all the same"
                )
            elif not bool((d2t == first_vocab[1]).all()):
                moved = int((d2t != first_vocab[1]).sum())
                notes.append(
                    f"its vocab map (d2t) moved against {first_vocab[0]}'s: {moved} of "
                    f"{d2t.numel()} draft rows map to other target tokens, evaluated all the "
                    f"same (`eagle-inspect doctor {ckpt.path} SAMPLES --parent {first_vocab[3]}` "
                    "says whether its head followed)"
                )
            ev = Evaluator(
                draft,
                sample_set,
                ttt_steps=ttt,
                target_head=None if head is None else head.to(dev, draft.dtype),
            )
            checked = check(ev) if check is not None else None
            if checked:
                notes.append(checked)
            note = "; ".join(notes) or None
            stats, wr, report = evaluate_checkpoint(ev, spec, engine, wiring, limit, overlap)
        except InputError as e:
            out_refused.append((str(ckpt.path), str(e)))
            if progress is not None:
                progress(k + 1, len(checkpoints))
            continue
        n_samples = max(n_samples, report.samples)
        r = CheckpointResult(
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
            round(time.perf_counter() - t0, 3),
        )
        results.append(r)
        if state is not None:
            _append_state(state, key, r)
        if progress is not None:
            progress(k + 1, len(checkpoints))
    return SweepRunReport(
        run_dir="",
        spec=spec,
        engine=engine,
        wiring=wiring,
        samples=n_samples,
        results=results,
        refused=out_refused,
        state=str(state) if state is not None else None,
    )
