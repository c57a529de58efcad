"""Phrasing the checks share: a finding's two texts, and the command lines they quote.

A leaf: it imports no check (each check words its own findings, in its own module).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple


class Text(NamedTuple):
    """A finding's words: what is wrong (or fine), and the fix ("" when none is needed)."""

    summary: str
    fix: str = ""


# The fix for an order no engine can feed (the wiring and serving findings quote it).
WRITE_FIXED = "eagle-inspect doctor CKPT SAMPLES --write-fixed OUT"

# llama.cpp's converter (run from a llama.cpp checkout), which bakes an EAGLE-3 draft's target
# layers into the GGUF: the gguf findings quote it for a reconversion.
CONVERT_TO_GGUF = (
    "python convert_hf_to_gguf.py {hf_draft} --target-model-dir {target} --outfile {outfile}"
)


# A GGUF tensor type -> the converter's --outtype that writes it (other types come from
# llama-quantize, after the conversion)
OUTTYPES = {"F32": "f32", "F16": "f16", "BF16": "bf16", "Q8_0": "q8_0"}


def reconvert_command(
    target: str | Path | None,
    gguf: str | Path,
    fc_type: str | None,
    hf_draft: str | Path = "HF_DRAFT_DIR",
) -> str:
    """llama.cpp's converter run on the HF draft, writing a new GGUF beside `gguf` (with the
    --outtype that writes its fc.weight's GGUF type `fc_type`, where one does)."""
    outtype = OUTTYPES.get(fc_type or "")
    p = Path(gguf)
    cmd = CONVERT_TO_GGUF.format(
        hf_draft=hf_draft,
        target=target if target is not None else "TARGET_DIR",
        outfile=p.with_name(p.stem + ".fixed.gguf"),
    )
    return cmd + (f" --outtype {outtype}" if outtype else "")
