"""The checkpoints of a training run's folder, ordered by their training step.

The trainers' layouts, as they name their checkpoint folders:

- SpecForge: `epoch_{E}_step_{S}` (and `epoch_{E}`), each a draft folder (config.json +
  model.safetensors);
- speculators: `checkpoint_{N}` / `checkpoint-{N}` (also the HF Trainer's), or a folder named by
  its step alone (`checkpoints/1200`), with `checkpoint_best` / `final` beside them;
- anything else with a config.json and *.safetensors: ordered after the numbered ones, by name.

A folder found below RUN_DIR (up to two levels down) that holds a config.json is a checkpoint;
RUN_DIR itself is one when it holds no checkpoint folders. A folder with a config.json but no
*.safetensors (a save cut short) is reported in one line and left out; so is an unreadable one.
Nothing here is loaded: `load_draft` refuses what does not load, one line each, later.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from inspector.errors import InputError

CONFIG = "config.json"
_SPECFORGE = re.compile(r"^epoch_(\d+)(?:_step_(\d+))?$")
_NUMBERED = re.compile(r"^(?:checkpoint[-_]?|step[-_]?|ckpt[-_]?)?(\d+)$", re.IGNORECASE)
MAX_DEPTH = 2


@dataclass(frozen=True)
class RunCheckpoint:
    """One checkpoint folder of a run: where it is, its name relative to the run, its step
    (None: its name carries none) and epoch (SpecForge's names)."""

    path: Path
    name: str
    step: int | None
    epoch: int | None = None

    @property
    def order(self) -> tuple:
        # numbered ones by step (an epoch alone orders within its own kind), then by name
        if self.step is not None:
            return (0, self.step, self.epoch or 0, self.name)
        if self.epoch is not None:
            return (1, self.epoch, 0, self.name)
        return (2, 0, 0, self.name)

    def label(self) -> str:
        if self.step is not None:
            return f"{self.name} (step {self.step:,})"
        return self.name


@dataclass
class RunScan:
    checkpoints: list[RunCheckpoint]
    refused: list[tuple[Path, str]]  # (folder, why), one line each


def parse_step(name: str) -> tuple[int | None, int | None]:
    """(step, epoch) from a checkpoint folder's name, where it carries them."""
    m = _SPECFORGE.match(name)
    if m:
        epoch = int(m.group(1))
        return (int(m.group(2)) if m.group(2) is not None else None), epoch
    m = _NUMBERED.match(name)
    if m:
        return int(m.group(1)), None
    return None, None


def _is_checkpoint(folder: Path) -> bool:
    return (folder / CONFIG).is_file()


def _candidates(run: Path) -> list[Path]:
    out: list[Path] = []
    frontier = [run]
    for _ in range(MAX_DEPTH):
        nxt: list[Path] = []
        for d in frontier:
            try:
                kids = sorted(p for p in d.iterdir() if p.is_dir() and not p.name.startswith("."))
            except OSError:
                continue
            for k in kids:
                if _is_checkpoint(k):
                    out.append(k)
                else:
                    nxt.append(k)
        frontier = nxt
    return out


def find_checkpoints(run_dir: str | Path) -> RunScan:
    """The run's checkpoints in training order (module docstring)."""
    run = Path(run_dir)
    if not run.is_dir():
        raise InputError(run, None, "not a folder: pass a training run's output folder")
    folders = _candidates(run)
    if not folders and _is_checkpoint(run):
        folders = [run]
    found: list[RunCheckpoint] = []
    refused: list[tuple[Path, str]] = []
    for f in folders:
        name = f.name if f == run else str(f.relative_to(run))
        if not any(f.glob("*.safetensors")):
            refused.append((f, f"{CONFIG} but no *.safetensors: a checkpoint save cut short?"))
            continue
        step, epoch = parse_step(f.name)
        found.append(RunCheckpoint(f, name, step, epoch))
    found.sort(key=lambda c: c.order)
    if not found and not refused:
        raise InputError(
            run, None, f"no checkpoint in it: no folder with a {CONFIG} (up to {MAX_DEPTH} down)"
        )
    return RunScan(found, refused)
