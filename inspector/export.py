"""JSON export of one sample's predictions under every wiring computed for it (the app's `e` key).

The file goes into the folder `open --out DIR` names, else `./eagle-inspect-exports/` (made on the
first export, so exports never litter the working directory), written atomically (a temporary file
in the same folder, then os.replace), and never into a folder the inputs were read from: an export
must not land among checkpoint or sample files that a trainer or server will later glob.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from inspector.errors import InputError
from inspector.input_folders import enclosing_input
from inspector.strict_json import json_safe

FORMAT = "eagle-inspect-sample-export/1"
DEFAULT_DIR = "eagle-inspect-exports"  # under the working directory, where no --out is given


def check_out_dir(out_dir: Path, input_paths: Sequence[str | Path]) -> Path:
    """out_dir resolved; InputError if it is, or lies inside, a folder an input came from."""
    out = Path(out_dir).resolve()
    folder = enclosing_input(out, input_paths)
    if folder is not None:
        raise InputError(
            out, None, f"refusing to export into input folder {folder}: run from another directory"
        )
    return out


def export_filename(sample_index: int, sample_path: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(sample_path).stem) or "sample"
    return f"eagle-inspect-sample{sample_index:04d}-{stem}.json"


def build_document(
    predictions: Sequence[tuple[str, Any]],
    *,
    sample_index: int,
    sample_path: str,
    checkpoint: str,
    layout: str,
    slot_labels: Sequence[str],
    ttt_steps: int,
    device: str,
    dtype: str,
    input_ids: Sequence[int] | None = None,
    decode: Callable[[int], str | None] | None = None,
) -> dict:
    """The export document. `predictions` holds (label, SamplePredictions) pairs."""
    wirings = []
    for label, pred in predictions:
        positions = []
        for sp in pred.steps:
            for r in range(len(sp)):
                d = sp.position_dict(r, sample_index)
                if decode is not None:
                    d["input_text"] = decode(d["input"])
                    d["true_text"] = decode(d["true"])
                    d["pred_text"] = decode(d["pred_target"])
                positions.append(d)
        wirings.append(
            {
                "wiring": list(pred.wiring.slots),
                "slots": [
                    slot_labels[i] if i < len(slot_labels) else f"s{i}" for i in pred.wiring.slots
                ],
                "label": label,
                "steps": [m.to_dict() for m in pred.metrics],
                "acceptance_length": pred.acceptance_length,
                "acceptance_length_estimate": pred.acceptance_length_estimate,
                "positions": positions,
            }
        )
    doc = {
        "format": FORMAT,
        "checkpoint": checkpoint,
        "layout": layout,
        "device": device,
        "dtype": dtype,
        "ttt_steps": ttt_steps,
        "sample": {"index": sample_index, "path": sample_path},
        "slots": list(slot_labels),
        "wirings": wirings,
    }
    if input_ids is not None:
        doc["sample"]["input_ids"] = [int(i) for i in input_ids]
        if decode is not None:
            doc["sample"]["tokens"] = [decode(int(i)) for i in input_ids]
    return json_safe(doc)[0]


def write_json_atomic(path: Path, doc: dict) -> Path:
    """Write doc to path through a temporary file in the same folder and os.replace."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1, allow_nan=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def export_sample(
    predictions: Sequence[tuple[str, Any]],
    *,
    sample_index: int,
    sample_path: str,
    input_paths: Sequence[str | Path],
    out_dir: str | Path | None = None,
    **meta: Any,
) -> Path:
    """Write the export for one sample into out_dir (default: ./eagle-inspect-exports), the
    folder made where missing; its path."""
    out = check_out_dir(Path.cwd() / DEFAULT_DIR if out_dir is None else Path(out_dir), input_paths)
    out.mkdir(parents=True, exist_ok=True)
    doc = build_document(predictions, sample_index=sample_index, sample_path=sample_path, **meta)
    return write_json_atomic(out / export_filename(sample_index, sample_path), doc)


def shown_path(path: str | Path) -> str:
    """A written file as the notification names it: relative to the working directory where it
    lies under it (eagle-inspect-exports/...), else absolute."""
    p = Path(path)
    try:
        return str(p.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(p)
