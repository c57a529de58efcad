"""Write INPUT's prompts as token ids, exactly as the project's capture / live loop feeds them.

Runs in the project's venv (it imports the inspector). The live loop (`inspector.serving.live`
`live_accept`) resolves INPUT with capture's `prepare`: `read_input(input, target,
vocab_size=<target's vocabulary>, max_length=<capture's default: min(2048, the target's
max_position_embeddings)>)`, then decodes from `record.prompt[:cut]`, cut = max_length - max_new
- steps (the deepest verified position must fit). This script does the same, so an engine given
these ids starts from the very prompts our loop starts from.

    python tests/engine/prompts.py --target assets/demo/target --input assets/demo/prompts.jsonl \
        --max-new 128 --steps 5 --out prompts.json

Output: {"prompts": [[ids...], ...], "max_length": ..., "cut": ..., "truncated": [indexes]}
(`truncated`: prompts that `cut` shortened; `steps` should be the largest k an engine runs, the
cut then fits every k).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from inspector.capture.inputs import read_input
from inspector.capture.run import DEFAULT_MAX_LENGTH
from inspector.capture.transformers_target import read_target_info


def prompt_ids(
    target: str | Path, input: str | Path, *, max_new: int, steps: int, max_length: int | None
) -> dict:
    info = read_target_info(target)
    # capture's `prepare`: --max-length, else min(2048, max_position_embeddings)
    length = max_length or min(DEFAULT_MAX_LENGTH, info.max_positions or DEFAULT_MAX_LENGTH)
    records, notes = read_input(input, target, vocab_size=info.vocab_size, max_length=length)
    cut = length - max_new - steps  # live_accept's cut
    if cut < 1:
        raise SystemExit(f"prompts.py: max_length {length} - max_new {max_new} - steps {steps} < 1")
    prompts = [list(map(int, r.prompt[:cut])) for r in records]
    empty = [i for i, p in enumerate(prompts) if not p]
    if empty:
        raise SystemExit(f"prompts.py: prompts {empty} have no token before the generated part")
    return {
        "prompts": prompts,
        "max_length": length,
        "max_new": max_new,
        "steps": steps,
        "cut": cut,
        "truncated": [i for i, r in enumerate(records) if len(r.prompt) > cut],
        "notes": notes,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", required=True, help="the target's HF folder (its tokenizer)")
    ap.add_argument("--input", required=True, help="capture's INPUT (JSONL or .txt)")
    ap.add_argument("--max-new", type=int, default=128, help="tokens generated per prompt")
    ap.add_argument("--steps", type=int, default=5, help="the largest k (draft steps) to run")
    ap.add_argument("--max-length", type=int, default=None, help="capture's --max-length")
    ap.add_argument("--out", required=True, help="JSON file to write")
    a = ap.parse_args(argv)
    doc = prompt_ids(a.target, a.input, max_new=a.max_new, steps=a.steps, max_length=a.max_length)
    Path(a.out).write_text(json.dumps(doc) + "\n", encoding="utf-8")
    lens = [len(p) for p in doc["prompts"]]
    print(
        f"{len(lens)} prompts ({min(lens)}..{max(lens)} tokens, cut {doc['cut']}, "
        f"{len(doc['truncated'])} truncated) -> {a.out}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
