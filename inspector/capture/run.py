"""`capture`: run the target over INPUT and write the slots as speculators v1 samples.

Order of work: the target's config (layer count, vocabulary), the draft's ids when one is given,
the slot plan, INPUT, then the output folder (refused or resumed, see ``store``) and only then the
weights, so that every mistake in the arguments fails in a second with one line.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from inspector.capture import store
from inspector.capture.inputs import MIN_TOKENS, Record, read_input
from inspector.capture.plan import DraftIds, SlotPlan, plan_slots, read_draft_ids
from inspector.capture.transformers_target import DTYPE_NAMES, TargetInfo, read_target_info
from inspector.errors import InputError, setting_field
from inspector.progress import Progress

DEFAULT_MAX_LENGTH = 2048
# Tokens of the target's continuation written past a generated request's stop: a vLLM chain of k
# drafts reads k - 1 of them in its last round, SGLang's round after the stop up to 2k.
DEFAULT_PAST_STOP = 16
SAVE_DTYPES = ("bfloat16", "float16", "float32")


@dataclass(frozen=True)
class CaptureSettings:
    """Everything but the target, INPUT and the output folder (see ``eagle-inspect capture -h``)."""

    layers: str | None = None
    draft: str | None = None
    engine: str | None = None
    generate: int = 0
    temperature: float = 0.0
    seed: int = 0
    max_length: int | None = None
    dtype: str = "auto"
    device: str = "auto"
    device_map: str | None = None
    save_dtype: str = "bfloat16"
    past_stop: int = DEFAULT_PAST_STOP  # with `generate`: the continuation past the stop


@dataclass
class CaptureResult:
    out: Path
    plan: SlotPlan
    samples: int  # in the folder
    written: int  # by this run
    skipped: int  # already there (resumed)
    tokens: int  # captured by this run
    seconds: float  # capture loop only (load time excluded)
    notes: list[str] = field(default_factory=list)


@dataclass
class Prepared:
    """A capture resolved down to its samples and its settings key, before any weights load."""

    target: Path
    info: TargetInfo
    plan: SlotPlan
    records: list[Record]
    settings: CaptureSettings
    max_length: int
    key: str
    input_sha256: str
    notes: list[str]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _target_identity(target: Path) -> dict:
    """The target folder's identity for the settings key: path, config, weight file sizes."""
    files = sorted(
        (p.name, p.stat().st_size)
        for p in target.iterdir()
        if p.is_file() and p.suffix in (".safetensors", ".bin", ".json")
    )
    return {"path": str(target.resolve()), "files": files}


def prepare(
    target: str | Path,
    input: str | Path,
    settings: CaptureSettings,
    *,
    draft_ids: DraftIds | None = None,
) -> Prepared:
    """Resolve the plan and INPUT (no weights loaded); raises InputError on any bad argument.

    ``draft_ids``: the ids of a draft already loaded (the live loop's), instead of reading
    ``settings.draft`` again."""
    target = Path(target)
    s = settings
    if s.save_dtype not in SAVE_DTYPES:
        raise InputError(
            None, setting_field("save-dtype"), f"{s.save_dtype!r}: one of {', '.join(SAVE_DTYPES)}"
        )
    if s.dtype not in DTYPE_NAMES:
        raise InputError(
            None, setting_field("dtype"), f"{s.dtype!r}: one of {', '.join(DTYPE_NAMES)}"
        )
    if s.generate < 0:
        raise InputError(None, setting_field("generate"), "must be >= 0")
    if s.past_stop < 0:
        raise InputError(None, setting_field("past-stop"), "must be >= 0")
    if s.temperature < 0:
        raise InputError(None, setting_field("temperature"), "must be >= 0")
    info = read_target_info(target)
    draft = draft_ids or (read_draft_ids(s.draft, target) if s.draft else None)
    plan = plan_slots(info.num_layers, layers=s.layers, draft=draft, engine=s.engine)
    max_length = s.max_length or min(DEFAULT_MAX_LENGTH, info.max_positions or DEFAULT_MAX_LENGTH)
    if max_length < MIN_TOKENS:
        raise InputError(None, setting_field("max-length"), f"{max_length}: at least {MIN_TOKENS}")
    if s.generate >= max_length:
        raise InputError(
            None, setting_field("generate"), f"{s.generate} tokens leave no room for a prompt"
        )
    records, notes = read_input(input, target, vocab_size=info.vocab_size, max_length=max_length)
    input_sha = _sha256(Path(input))
    key_src = {
        "target": _target_identity(target),
        "input_sha256": input_sha,
        "slots": list(plan.slots),
        "generate": s.generate,
        "temperature": s.temperature if s.generate else None,
        "seed": s.seed if s.generate and s.temperature > 0 else None,
        "max_length": max_length,
        "dtype": s.dtype,
        "save_dtype": s.save_dtype,
    }
    if s.generate and s.past_stop:
        key_src["past_stop"] = s.past_stop
    key = hashlib.sha256(json.dumps(key_src, sort_keys=True).encode()).hexdigest()
    return Prepared(
        target, info, plan, records, s, max_length, key, input_sha, [*plan.notes, *notes]
    )


def data_config(p: Prepared, input: str | Path, complete: bool) -> dict:
    """speculators v1 data_config.json, with HF indices and this tool's marker and settings."""
    L = p.info.num_layers
    gen = p.settings.generate
    extra: dict = {}
    if gen:
        mask = f"0 on the prompt, 1 on up to {gen} tokens the target generated after it"
        if p.settings.past_stop:
            extra["continuation"] = (
                f"continuation_ids / continuation_hidden_states: the target's next "
                f"{p.settings.past_stop} tokens after the request's stop (past the EOS too), "
                "outside the request: an engine counts its last round's drafts against them; "
                "finish_reason: 'stop' (EOS) or 'length'"
            )
    else:
        mask = "1 on the response / assistant turns / every token, as INPUT's form says"
    return {
        "format": {
            "schema": "speculators-v1",
            "file_pattern": "data_{i}.pt",
            "num_samples": len(p.records),
        },
        "hidden_states": {
            "layer_ids": list(p.plan.slots),
            "index_convention": "hf",
            "index_note": (
                "layer_ids are indices into HF output_hidden_states (0 = embedding output, "
                f"k = output of decoder layer k-1); {L} is the last decoder layer's output "
                "taken BEFORE the final norm (the verifier's last state, always the last slot); "
                '"post-norm" is the final norm\'s output'
            ),
            "labels": p.plan.labels(),
            "dtype": p.settings.save_dtype,
        },
        "loss_mask": mask,
        **extra,
        "generator": store.GENERATOR,
        "capture": {
            "key": p.key,
            "complete": complete,
            "target": str(p.target.resolve()),
            "input": str(Path(input).resolve()),
            "input_sha256": p.input_sha256,
            "max_length": p.max_length,
            "plan": p.plan.to_dict(),
            "settings": asdict(p.settings),
        },
    }


def capture(
    target: str | Path,
    input: str | Path,
    out: str | Path,
    settings: CaptureSettings | None = None,
    *,
    progress: Progress | None = None,
    prepared: Prepared | None = None,
) -> CaptureResult:
    """Capture INPUT through ``target`` into ``out`` (see the module docstring); resumable."""
    import torch

    from inspector.capture.transformers_target import TargetModel

    p = prepared or prepare(target, input, settings or CaptureSettings())
    s = p.settings
    out = Path(out)
    resumed = store.check_output(out, p.key)
    todo = [i for i in range(len(p.records)) if not store.sample_path(out, i).is_file()]
    notes = list(p.notes)
    if resumed:
        notes.append(f"resumed: {len(p.records) - len(todo)} samples already in {out}")
    save_dtype = getattr(torch, s.save_dtype)
    # The weights load before the folder is made: a model that fails to load leaves nothing.
    model = (
        TargetModel(p.target, dtype=s.dtype, device=s.device, device_map=s.device_map)
        if todo
        else None
    )
    out.mkdir(parents=True, exist_ok=True)
    store.write_config(out, data_config(p, input, complete=False))
    tokens = 0
    t0 = time.perf_counter()
    if model is not None:
        done = len(p.records) - len(todo)
        if progress:
            progress(done, len(p.records))
        for i in todo:
            r = p.records[i]
            ids, mask = r.ids, r.mask
            tail: list[int] = []
            finish = "length"
            if s.generate:
                prompt = r.prompt[: p.max_length - s.generate]
                g = model.generate(
                    prompt,
                    s.generate,
                    temperature=s.temperature,
                    seed=(s.seed * 1_000_003 + i) % (1 << 62),
                    # the continuation stays inside --max-length, as the request does
                    past_stop=min(s.past_stop, p.max_length - s.generate - len(prompt)),
                )
                ids, mask = prompt + g.new, [0] * len(prompt) + [1] * len(g.new)
                tail, finish = g.tail, g.finish
                if len(ids) < MIN_TOKENS:
                    raise InputError(r.where, None, f"{len(ids)} tokens after generation")
            # one forward over the request and its continuation: causal, so the request's
            # slots are its own
            both = model.slots(ids + tail, p.plan.slots, save_dtype)
            # clones: a saved view would carry the whole storage into the file
            slots = [x[: len(ids)].clone() if tail else x for x in both]
            cont = None
            if s.generate and s.past_stop:
                cont = (
                    torch.tensor(tail, dtype=torch.long),
                    [x[len(ids) :].clone() for x in both],
                    finish,
                )
            store.write_sample(
                out, i, torch.tensor(ids), slots, torch.tensor(mask), cont, category=r.category
            )
            tokens += len(ids)
            done += 1
            if progress:
                progress(done, len(p.records))
    seconds = time.perf_counter() - t0
    # Generated samples have their length only in their file (a resumed run did not make them).
    lengths = {
        i: _stored_length(out, i) if s.generate else len(r.ids) for i, r in enumerate(p.records)
    }
    store.write_lengths(out, lengths)
    store.write_config(out, data_config(p, input, complete=True))
    return CaptureResult(
        out, p.plan, len(p.records), len(todo), len(p.records) - len(todo), tokens, seconds, notes
    )


def _stored_length(out: Path, i: int) -> int:
    import torch

    data = torch.load(store.sample_path(out, i), weights_only=True, mmap=True)
    return int(data["input_ids"].numel())
