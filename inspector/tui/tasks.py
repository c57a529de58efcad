"""Tasks the screens submit to the device thread (`DeviceThread.submit`): each is a function of the
backend (its evaluator, and what it loaded once: the target), run on the device thread, whose
result or error comes back as `Reports.task_done`. No Textual.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

    from inspector.tui.backend import Backend
    from inspector.tui.summary import Summary

from inspector.wiring import Wiring, WiringKey, named_label


def export_task(
    session: Summary,
    sample: int,
    wirings: Sequence[WiringKey],
    input_ids: np.ndarray | None,
    out_dir: str | Path | None = None,
) -> Callable[[Backend], Path]:
    """Write sample `sample`'s predictions under `wirings` to JSON in `out_dir` (default
    ./eagle-inspect-exports, made on demand; `inspector.export`, which refuses input folders);
    returns the file written."""
    s = session
    labels = [
        (named_label(Wiring(tuple(w)), s.slot_info, s.preset_name(w)), tuple(w)) for w in wirings
    ]
    decode = s.decoder.raw if s.decoder.has_text else None

    def job(backend: Backend) -> Path:
        from inspector.export import export_sample
        from inspector.wiring import Wiring

        ev = backend.evaluator
        preds = [(label, ev.predict(sample, Wiring(w))) for label, w in labels]
        return export_sample(
            preds,
            sample_index=sample,
            sample_path=s.files[sample],
            input_paths=s.input_paths,
            out_dir=out_dir,
            checkpoint=s.checkpoint,
            layout=s.layout,
            slot_labels=[x.label for x in s.slot_info],
            ttt_steps=s.ttt_steps,
            device=s.device,
            dtype=s.dtype,
            input_ids=input_ids,
            decode=decode,
        )

    return job
