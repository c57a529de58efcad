"""The capture's output folder: speculators v1 files, marked as this tool's own, resumable.

``data_config.json`` is written before the first sample and names the generator and a key of the
capture's settings; a folder is resumed only when both match, and a non-empty folder without them
is refused (it is someone else's data). Samples are written to a hidden temporary name and renamed,
so an interrupted run never leaves a half-written ``data_{i}.pt`` behind; a rerun skips the ones
that exist.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from inspector.errors import InputError

GENERATOR = "eagle-inspect capture"
OWN_FILES = ("data_config.json", "sample_lengths.json")


def _is_own_file(name: str) -> bool:
    return (
        name in OWN_FILES
        or (name.startswith("data_") and name.endswith(".pt"))
        or (name.startswith(".data_") and name.endswith(".partial"))
    )


def read_marker(out: Path) -> dict | None:
    """This tool's data_config.json in ``out``, or None when there is none (or another one)."""
    path = out / "data_config.json"
    if not path.is_file():
        return None
    try:
        cfg = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(cfg, dict) or cfg.get("generator") != GENERATOR:
        return None
    return cfg


def check_output(out: Path, key: str) -> bool:
    """Whether ``out`` may take the capture with settings ``key``: True when it resumes one, False
    when it is absent or empty. Creates nothing.

    Refuses a non-empty folder that is not this tool's output, or holds a capture of other settings.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise InputError(out, None, "exists and is not a folder")
    entries = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    if not entries:
        return False
    marker = read_marker(out)
    if marker is None:
        raise InputError(
            out, None, "not empty and not an eagle-inspect capture: choose a new or empty folder"
        )
    if marker.get("capture", {}).get("key") != key:
        raise InputError(
            out,
            "data_config.json",
            "holds a capture with other settings (target, input, layers, generation): "
            "choose a new or empty folder",
        )
    strangers = [n for n in entries if not _is_own_file(n)]
    if strangers:
        raise InputError(out, strangers[0], "unexpected file in a capture folder: not resuming")
    return True


def sample_path(out: Path, i: int) -> Path:
    return out / f"data_{i}.pt"


def write_sample(
    out: Path,
    i: int,
    ids: torch.Tensor,
    slots: list[torch.Tensor],
    mask: torch.Tensor,
    continuation: tuple[torch.Tensor, list[torch.Tensor], str] | None = None,
    category: str | None = None,
) -> None:
    """``data_{i}.pt`` as speculators v1 writes it, atomically; ``category``: the input line's,
    under a key of its own (trainers read their three keys only).

    ``continuation``: (ids, slots, finish reason) of the target's tokens past the request's stop,
    under keys of their own (`formats.samples.CONTINUATION_KEYS`): trainers read the request's
    three keys and nothing else, so the continuation stays outside it."""
    tmp = out / f".data_{i}.pt.partial"
    data: dict = {
        "input_ids": ids.to(torch.int64).contiguous(),
        "hidden_states": [s.contiguous() for s in slots],
        "loss_mask": mask.to(torch.int64).contiguous(),
    }
    if continuation is not None:
        c_ids, c_slots, finish = continuation
        data["continuation_ids"] = c_ids.to(torch.int64).contiguous()
        data["continuation_hidden_states"] = [s.contiguous() for s in c_slots]
        data["finish_reason"] = finish
    if category is not None:
        data["category"] = category
    torch.save(data, tmp)
    os.replace(tmp, sample_path(out, i))


def write_config(out: Path, config: dict) -> None:
    tmp = out / ".data_config.json.partial"
    tmp.write_text(json.dumps(config, indent=2) + "\n")
    os.replace(tmp, out / "data_config.json")


def write_lengths(out: Path, lengths: dict[int, int]) -> None:
    (out / "sample_lengths.json").write_text(
        json.dumps({str(i): n for i, n in sorted(lengths.items())}, indent=1) + "\n"
    )


def is_complete(out: Path, key: str) -> bool:
    """Whether ``out`` holds a finished capture with settings ``key``."""
    marker = read_marker(Path(out))
    if marker is None:
        return False
    cap = marker.get("capture", {})
    n = marker.get("format", {}).get("num_samples")
    return (
        cap.get("key") == key
        and cap.get("complete") is True
        and isinstance(n, int)
        and all(sample_path(Path(out), i).is_file() for i in range(n))
    )
