"""What the live loop gives back of one prompt's rounds (`live.live_accept`): the record the replay
reports a sample by, so every view and `reconcile` read both alike, and the realised sequence as a
capture-format sample under its wiring's folder, marked with the key of the run's settings."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from inspector.draft import Draft
from inspector.engines import Engine
from inspector.serving.expectation import SampleOdds
from inspector.serving.live_sequence import LiveSequence
from inspector.serving.replay import SampleReplay
from inspector.serving.sampling_settings import SamplingSettings
from inspector.serving.spec import DraftSpec
from inspector.wiring import Wiring

if TYPE_CHECKING:  # capture loads transformers; only the loop itself needs it
    from inspector.capture.run import Prepared


def run_key(
    prep: Prepared,
    draft: Draft,
    spec: DraftSpec,
    wiring: Wiring,
    engine: Engine,
    rules: SamplingSettings,
) -> str:
    """The key a wiring's folder is marked with: a rerun resumes it only under these settings."""
    return hashlib.sha256(
        json.dumps(
            {
                "capture": prep.key,
                "draft": str(Path(draft.path).resolve()) if draft.path else None,
                "spec": spec.to_dict(),
                "wiring": list(wiring.slots),
                "engine": engine.value,
                "sampling": rules.to_dict(),
            },
            sort_keys=True,
        ).encode()
    ).hexdigest()


def write_live_sample(fold: Path, i: int, seq: LiveSequence, category: str | None) -> str:
    """The realised sequence as a capture-format sample (loss mask from x_P on, the features
    the loop fed its draft, the target's continuation past its stop); its path."""
    from inspector.capture import store

    mask = [0] * seq.prompt_len + [1] * (len(seq.ids) - seq.prompt_len)
    cont = (torch.tensor(seq.tail, dtype=torch.long), seq.tail_slots, seq.finish)
    store.write_sample(
        fold,
        i,
        torch.tensor(seq.ids),
        seq.slots,
        torch.tensor(mask),
        cont,
        category=category,
    )
    return str(store.sample_path(fold, i))


def live_sample_replay(
    seq: LiveSequence, i: int, path: str, spec: DraftSpec, greedy: bool, category: str | None
) -> SampleReplay:
    """The loop's rounds of prompt `i` as the replay reports a sample's (`greedy`: no odds kept;
    the drafted counts only where some round drafted other than `spec.steps`)."""
    rounds = seq.rounds
    starts = [r.start for r in rounds]
    accepted = [r.accepted for r in rounds]
    drafted = [r.drafted for r in rounds]
    a_by_start = np.full(len(seq.ids) + len(seq.tail), -1, dtype=np.int64)
    a_by_start[starts] = accepted
    return SampleReplay(
        i,
        path,
        np.array(starts, dtype=np.int64),
        np.array(accepted, dtype=np.int64),
        np.array([r.emitted for r in rounds], dtype=np.int64),
        a_by_start,
        spec.steps,
        after_stop=np.array([r.after_stop for r in rounds], dtype=bool),
        drafted=(
            np.array(drafted, dtype=np.int64)
            if spec.early_stop or any(d != spec.steps for d in drafted)
            else None
        ),
        completion_tokens=len(seq.ids) - seq.prompt_len,
        odds=(
            None
            if greedy
            else SampleOdds.of([r.odds for r in rounds if r.odds is not None], spec.steps)
        ),
        category=category,
    )
