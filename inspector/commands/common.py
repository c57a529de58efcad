"""From command-line arguments to the session's `Inputs` (the loading itself is `inspector.session`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from inspector.commands.output import safe
from inspector.errors import InputError
from inspector.session import Inputs, demo_inputs, load_evaluator
from inspector.wiring import PRESETS, preset_name

__all__ = [
    "Inputs",
    "load_evaluator",
    "parse_slot_layers",
    "resolve_inputs",
    "open_evaluator",
    "print_sample_notes",
    "print_skips",
    "wirings_and_names",
]


def parse_slot_layers(text: str | None) -> list[int] | None:
    """`--slot-layers 0,2,4,6`: the HF hidden_states index of every slot (0 = embedding output,
    k = output of decoder layer k-1), overriding data_config.json."""
    if not text:
        return None
    parts = [p for p in text.replace(" ", "").strip("[]").split(",") if p]
    if not parts or not all(p.isascii() and p.isdigit() for p in parts):
        raise InputError(
            None, "--slot-layers", f"{text!r}: expected non-negative integers like 0,2,4,6"
        )
    return [int(p) for p in parts]


def _named_verifier(checkpoint: Path) -> tuple[Path, str]:
    """`--target auto`: the verifier the draft's config names, on this machine, and a note."""
    from inspector.formats.verifier import NAME_KEY, find_verifier

    if checkpoint.suffix.lower() == ".gguf" and not checkpoint.is_dir():
        raise InputError(
            checkpoint, "--target auto", "a GGUF draft names no verifier: pass --target DIR"
        )
    found = find_verifier(checkpoint)
    if found is None:
        raise InputError(checkpoint / "config.json", NAME_KEY, "absent: pass --target DIR")
    if found.folder is None:
        raise InputError(
            checkpoint / "config.json",
            NAME_KEY,
            f"{found.name!r} is not on this machine (a folder, or the local Hugging Face cache): "
            "pass --target DIR",
        )
    return found.folder, found.note()


def resolve_inputs(args: argparse.Namespace) -> Inputs:
    """CKPT/SAMPLES as given, or the bundled demo (draft + samples/train + its target); with
    --prompts, the samples are captured from the target (cached) instead. `--target auto`: the
    verifier the draft's config names, found locally (which folder: in `notes`)."""
    target_arg = args.target
    target = Path(target_arg) if target_arg and target_arg != "auto" else None
    embed = Path(args.embed) if args.embed else None
    # only `open` takes --tokenizer (the other commands print no text)
    tokenizer = Path(args.tokenizer) if getattr(args, "tokenizer", None) else None
    slot_layers = parse_slot_layers(args.slot_layers)
    prompts = args.prompts
    if prompts and args.samples:
        raise InputError(prompts, "--prompts", "replaces SAMPLES: pass one or the other")
    if args.checkpoint is None:
        inputs = demo_inputs(
            list(args.samples),
            target=target,
            embed=embed,
            tokenizer=tokenizer,
            slot_layers=slot_layers,
        )
    elif not args.samples and not prompts:
        raise InputError(
            args.checkpoint, None, "SAMPLES missing: pass a sample folder, glob or files after CKPT"
        )
    else:
        inputs = Inputs(
            Path(args.checkpoint), list(args.samples), target, embed, tokenizer, False, slot_layers
        )
    if target_arg == "auto":
        inputs.target, note = _named_verifier(inputs.checkpoint)
        inputs.notes.append(note)
    if prompts:
        from inspector.capture.cache import prompts_samples

        device = args.device
        inputs.samples = [
            str(prompts_samples(prompts, inputs.target, draft=inputs.checkpoint, device=device))
        ]
    return inputs


def open_evaluator(args: argparse.Namespace, err, device: str, ttt_steps: int):
    """(inputs, evaluator) for a command over CKPT + SAMPLES (or --prompts): the inputs resolved,
    the draft and samples loaded with the command's --dtype and --memory-budget, and the notes
    of resolving them printed on `err`."""
    inputs = resolve_inputs(args)
    ev = load_evaluator(
        inputs,
        device=device,
        dtype=args.dtype,
        ttt_steps=ttt_steps,
        memory_budget=args.memory_budget,
    )
    print_load_notes(err, inputs, ev)
    return inputs, ev


def config_wiring_note(ev) -> str | None:
    """One line when the draft's config does not name the wiring its weights fit best (the
    doctor's step-0 wiring search on the first samples; the fc projections it computes are the
    evaluator's, cached for the replay that follows), else None."""
    from inspector.doctor.wiring.trained import find_trained_wiring

    try:
        return find_trained_wiring(ev).warning()
    except InputError:  # too few slots or no readable sample: the command itself says so
        return None


def warn_config_wiring(err, ev) -> None:
    """`config_wiring_note` as a warning line on `err`."""
    line = config_wiring_note(ev)
    if line:
        err.print(f"[yellow]warning[/] {safe(line)}", highlight=False, soft_wrap=True)


def warn_slot_faults(err, ev) -> None:
    """A warning line per slot the first samples hold no real state in (`doctor.checks.sample_integrity`:
    zeros, NaN or Inf, one constant state), so that no figure over it goes out unremarked."""
    from inspector.doctor.checks.sample_integrity import slots_at_fault

    try:
        faults = slots_at_fault(ev)
    except InputError:  # an unreadable sample: the command itself says so
        return
    infos = ev.slot_info
    for slot, words in faults.items():
        label = infos[slot].label if slot < len(infos) else f"s{slot}"
        err.print(
            f"[yellow]warning[/] slot {slot} ({safe(label)}) holds no real hidden state: "
            f"{safe(words)}; every figure over a wiring that feeds it measures the capture, not "
            "the draft (eagle-inspect doctor: sample_integrity)",
            highlight=False,
            soft_wrap=True,
        )


def as_engine_runs_it(err, draft, engine, *, num_layers=None, target=None):
    """The run of `draft` by `engine` (`doctor.wiring.engine_run`: the flags it reads otherwise, such as
    SGLang 0.5.23's `norm_before_residual`, read nowhere; the features it runs without, such as
    SGLang's q/k norms or llama.cpp's norm_output; with the target's layer count, the layers it
    feeds), with a note on `err` for each way its draft is another than the weights': the
    figures are the engine's. `.draft` is the draft it runs."""
    from inspector.doctor.wiring.engine_run import engine_run, engine_run_notes

    run = engine_run(draft, engine.value, num_layers=num_layers, target=target)
    for line in engine_run_notes(run):
        err.print(f"note: {safe(line)}", highlight=False, soft_wrap=True)
    return run


def target_facts(inputs, ev) -> tuple[int | None, object]:
    """(the target's layer count, its class) as the inputs tell them: the verifier's pre-norm
    slot's HF index, and the target's config.json or the samples' data_config.json."""
    from inspector.formats.target_config import data_config_target, read_target_class

    layers = next((s.hf_index for s in ev.slot_info if s.verifier and not s.post_norm), None)
    target = read_target_class(inputs.target) or data_config_target(ev.samples.data_config)
    return layers, target


def print_load_notes(err, inputs, ev) -> None:
    """The notes of resolving the inputs and of the dtype the draft is computed in."""
    dtype_note = [ev.draft.dtype_note] if ev.draft.dtype_note else []
    for note in [*inputs.notes, *dtype_note]:
        err.print(f"note: {safe(note)}", highlight=False, soft_wrap=True)


def print_sample_notes(err, skipped, warnings) -> None:
    """The samples a run skipped and the warnings about those it read, one line each."""
    for e in skipped:
        err.print(f"[yellow]skipped[/] {safe(e.line())}", highlight=False, soft_wrap=True)
    for w in warnings:
        err.print(f"[yellow]warning[/] {safe(w.line())}", highlight=False, soft_wrap=True)


def print_skips(err, report) -> None:
    """A run report's skipped samples and sample warnings on `err`, one line each, and how many
    samples counted; an error when none could be used."""
    print_sample_notes(err, report.skipped, report.warnings)
    total = len(report.skipped) + report.samples
    if report.skipped:
        err.print(f"used {report.samples} of {total} samples", highlight=False, soft_wrap=True)
    if report.samples == 0:
        raise InputError(None, None, f"none of the {total} samples could be used")


def wirings_and_names(ev, texts: list[str] | None) -> tuple[list, list[str | None]]:
    """`--wiring` (default: the presets) parsed against the evaluator's slots, and each one's
    name in the report (a preset's, else None)."""
    texts = texts or list(PRESETS)
    return [ev.wiring(t) for t in texts], [preset_name(t) for t in texts]


def open_block_draft(args: argparse.Namespace, err, *, dspark: bool = False):
    """(inputs, draft, sample set) of a block draft (DFlash), its load notes printed: what eval
    and doctor on a block draft both start from (`dspark`: `load_block`'s)."""
    from inspector.evaluate.block_eval import load_block

    inputs = resolve_inputs(args)
    draft, sample_set = load_block(
        str(inputs.checkpoint),
        inputs.samples,
        target=str(inputs.target) if inputs.target else None,
        embed=str(inputs.embed) if inputs.embed else None,
        device=args.device,
        dtype=args.dtype,
        dspark=dspark,
    )
    for note in [*inputs.notes, *draft.notes]:
        err.print(f"note: {note}", highlight=False, soft_wrap=True)
    return inputs, draft, sample_set


class LazySamples:
    """(index, sample) of the first `n` samples that load, read one at a time as iterated and
    held by nobody here: a block draft's sample holds every layer (GBs at 32K tokens), so a
    replay reads one, scores it and drops it. Each one that does not load is printed as skipped
    (once); none loading is an InputError when an iteration ends."""

    def __init__(self, sample_set, n: int, err) -> None:
        self.sample_set, self.n, self.err = sample_set, min(n, len(sample_set)), err
        self._skipped: set[int] = set()

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        got = 0
        for i in range(self.n):
            try:
                sample = self.sample_set[i]
            except InputError as e:
                if i not in self._skipped:
                    self._skipped.add(i)
                    self.err.print(
                        f"[yellow]skipped[/] sample {i}: {e}", highlight=False, soft_wrap=True
                    )
                continue
            got += 1
            yield i, sample
            del sample
        if not got:
            raise InputError(None, None, f"none of the {self.n} samples could be used")

    def head(self, k: int) -> list[tuple[int, object]]:
        """The first `k` that load (fewer where fewer do)."""
        from itertools import islice

        return list(islice(iter(self), k))


def readable_samples(sample_set, n: int, err) -> list[tuple[int, object]]:
    """(index, sample) of the first `n` samples that load; each one that does not is printed as
    skipped, and none loading is an InputError."""
    out = []
    for i in range(min(n, len(sample_set))):
        try:
            out.append((i, sample_set[i]))
        except InputError as e:
            err.print(f"[yellow]skipped[/] sample {i}: {e}", highlight=False, soft_wrap=True)
    if not out:
        raise InputError(None, None, f"none of the {n} samples could be used")
    return out
