"""`--prompts INPUT` on open / eval / doctor: capture INPUT through the target once, into a cache
folder keyed by the capture's settings, and hand the folder on as SAMPLES.

The folder is ``$XDG_CACHE_HOME/eagle-inspect/captures/<key>`` (``~/.cache`` without the variable;
``$EAGLE_INSPECT_CACHE`` replaces the whole ``.../eagle-inspect`` part). The key covers the target
(path, config and weight file sizes), the bytes of INPUT and the slots, so a changed input or
draft wiring captures anew, and a finished folder is reused as is; an interrupted one resumes.
"""

from __future__ import annotations

import os
from pathlib import Path

from inspector.capture import store
from inspector.capture.run import CaptureSettings, capture, prepare
from inspector.errors import InputError, setting_field
from inspector.progress import progress_bar


def cache_root() -> Path:
    explicit = os.environ.get("EAGLE_INSPECT_CACHE")
    if explicit:
        return Path(explicit) / "captures"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "eagle-inspect" / "captures"


def prompts_samples(
    prompts: str | Path,
    target: str | Path | None,
    *,
    draft: str | Path | None = None,
    device: str = "auto",
) -> Path:
    """The sample folder for ``--prompts``: captured (or found) in the cache.

    Slots: the draft's configured aux ids read in its layout's convention plus the last layer
    (``--layers auto``), or the engines' default ``2, L//2, L-3`` plus L when it names none.
    """
    if target is None:
        raise InputError(
            prompts, setting_field("target"), "--prompts needs --target DIR (the model to run)"
        )
    settings = CaptureSettings(draft=str(draft) if draft is not None else None, device=device)
    prepared = prepare(target, prompts, settings)
    out = cache_root() / prepared.key[:24]
    if store.is_complete(out, prepared.key):
        return out
    with progress_bar(f"capturing {Path(prompts).name}") as bar:
        capture(target, prompts, out, settings, progress=bar, prepared=prepared)
    return out
