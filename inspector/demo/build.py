"""Orchestrates the demo build: corpus -> tokenizer -> target -> generated samples -> draft.

Every random choice is drawn from generators seeded from ``seed``, torch runs on 2 threads, and the
file list is sorted, so a rerun on the same machine and Python gives the same files. The default
plan takes about 11 minutes on 2 idle CPU cores (measured: 662 s; target ~440 s, draft ~190 s).

The plan's time budgets are off by default: a busy or slow machine then takes longer but still
builds the same demo. With a budget set, training compresses its schedule to end on time (see
``target.progress_fraction``), which bounds the wall time at the cost of a weaker, non-reproducible
model; build_info records whether that happened.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from inspector.demo.corpus import load_corpus, stdlib_files
from inspector.demo.data import SLOT_HF_INDICES, capture_slots, make_sequences, save_samples
from inspector.demo.draft import (
    SERVE_WIRING,
    TRAIN_WIRING,
    draft_config,
    draft_vocab,
    evaluate,
    init_draft,
    save_draft,
    slot_mean_norms,
    train_draft,
)
from inspector.demo.tiny_target import TargetConfig, top1_accuracy, train_target
from inspector.demo.tokenizer import EOS, encode_documents, train_tokenizer
from inspector.demo_paths import default_demo_root
from inspector.errors import InputError, setting_field
from inspector.formats.files import os_text

# The entries of the output folder a build writes, and so replaces.
OWNED = ("target", "draft", "samples/train", "samples/held", "build_info.json")
FOLDERS = OWNED[:4]  # written into a staging folder first, then moved into place together


def check_out(out: Path) -> None:
    """Before the build's minutes of work: OUT (and its samples/) is a folder or absent, and
    writable. InputError naming the path otherwise."""
    for p in (out, out / "samples"):
        if (p.exists() or p.is_symlink()) and not p.is_dir():
            raise InputError(p, setting_field("out"), "exists and is not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
        os.rmdir(tempfile.mkdtemp(prefix=".write-check-", dir=out))
    except OSError as e:
        raise InputError(out, setting_field("out"), f"not writable: {os_text(e)}") from None


def _install(staging: Path, out: Path) -> None:
    """Move the freshly written folders into `out`, replacing only the ones the build owns (a
    user's out/samples/mine stays). Renames within one file system: never half a demo."""
    old = staging / ".replaced"
    for sub in FOLDERS:
        dst = out / sub
        dst.parent.mkdir(parents=True, exist_ok=True)
        if dst.exists() or dst.is_symlink():
            (old / sub).parent.mkdir(parents=True, exist_ok=True)
            os.replace(dst, old / sub)  # a symlink is moved, never followed
        os.replace(staging / sub, dst)


@dataclass(frozen=True)
class BuildPlan:
    """Sizes of the build. The defaults are the committed demo; tests use a tiny plan."""

    max_files: int | None = None  # None: every stdlib file
    vocab_size: int = 512
    target_steps: int = 950
    target_batch: int = 20
    target_seq_len: int = 192
    target_lr: float = 3e-3
    target_budget_s: float | None = None  # see the module docstring
    n_train_sequences: int = 400
    n_held_sequences: int = 48
    n_saved_train: int = 48  # the subset of training sequences shipped as samples/train
    prompt_len: tuple[int, int] = (16, 40)
    total_len: tuple[int, int] = (128, 176)
    temperature: float = 0.7
    draft_vocab_size: int = 256
    draft_epochs: int = 30
    draft_batch: int = 16
    draft_lr: float = 3e-3
    draft_budget_s: float | None = None


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def build(
    out: Path | None = None,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
    plan: BuildPlan | None = None,
) -> dict[str, Any]:
    """Build the demo into ``out`` (default: where the committed demo lives) (target/, draft/,
    samples/train, samples/held, build_info.json).

    Only those entries of ``out`` are replaced; anything else there is left alone. Returns the
    build_info dict that is also written to ``out/build_info.json``.
    """
    plan = plan or BuildPlan()
    out = Path(out) if out is not None else default_demo_root()
    check_out(out)
    t_start = time.perf_counter()
    say = progress or _stderr

    def log(msg: str) -> None:
        say(f"[{time.perf_counter() - t_start:6.1f}s] {msg}")

    # Sized for 2 cores; a different thread count changes reduction order, hence the bits.
    torch.set_num_threads(2)
    torch.manual_seed(seed)
    timings: dict[str, float] = {}
    phase_t = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal phase_t
        now = time.perf_counter()
        timings[name] = round(now - phase_t, 1)
        phase_t = now

    # 1. Corpus and tokenizer.
    files = stdlib_files()
    corpus = load_corpus(files, max_files=plan.max_files)
    log(
        f"corpus: {corpus.n_files} stdlib files, {len(corpus.train)} train / {len(corpus.held)} held documents"
    )
    tok = train_tokenizer(corpus.train, plan.vocab_size)
    eos_id = tok.token_to_id(EOS)
    train_docs = encode_documents(tok, corpus.train)
    held_docs = encode_documents(tok, corpus.held)
    stream = torch.tensor([t for d in train_docs for t in (*d, eos_id)], dtype=torch.long)
    # Byte-level BPE writes a newline as "Ċ"; prompts start right after such a token.
    newline_ids = {i for s, i in tok.get_vocab().items() if "Ċ" in s}
    log(f"tokenizer: vocab {tok.get_vocab_size()}, {stream.numel()} training tokens")
    lap("corpus_tokenizer")

    # 2. Target.
    tcfg = TargetConfig(vocab_size=tok.get_vocab_size())
    target, tstats = train_target(
        stream,
        tcfg,
        steps=plan.target_steps,
        batch=plan.target_batch,
        seq_len=plan.target_seq_len,
        seed=seed,
        lr=plan.target_lr,
        time_budget_s=plan.target_budget_s,
        progress=log,
    )
    tacc = top1_accuracy(target, held_docs, plan.target_seq_len)
    log(
        f"target: top-1 {tacc['top1']:.1%} on held-out files (most-common-token baseline {tacc['most_common_baseline']:.1%})"
    )
    lap("target")

    # 3. Data: prompts from held-out files (even documents for training data, odd for held samples,
    # so held samples share neither sequences nor prompt text with the draft's training data).
    seq_kw = dict(
        newline_ids=newline_ids,
        eos_id=eos_id,
        prompt_len=plan.prompt_len,
        total_len=plan.total_len,
        temperature=plan.temperature,
        progress=log,
    )
    train_seqs = make_sequences(
        target, held_docs[0::2], plan.n_train_sequences, seed=seed + 1, **seq_kw
    )
    held_seqs = make_sequences(
        target, held_docs[1::2], plan.n_held_sequences, seed=seed + 2, **seq_kw
    )

    def record(s) -> dict:
        # Round the slots to bf16 here: the draft then trains on exactly the values that are saved.
        return {
            "input_ids": s.ids,
            "hidden_states": [h.to(torch.bfloat16) for h in capture_slots(target, s)],
            "loss_mask": s.loss_mask,
        }

    train_recs = [record(s) for s in train_seqs]
    held_recs = [record(s) for s in held_seqs]
    lap("data")
    log(
        f"data: captured slots (HF indices {list(SLOT_HF_INDICES)}) for {len(train_recs)} + {len(held_recs)} sequences"
    )

    # 4. Draft.
    vocab = draft_vocab(train_recs, tcfg.vocab_size, plan.draft_vocab_size)
    dcfg = draft_config(tcfg.vocab_size, plan.draft_vocab_size, tcfg.hidden_size)
    draft = init_draft(
        dcfg, vocab, target.embed_tokens.weight.detach(), target.lm_head.weight.detach(), seed
    )
    dstats = train_draft(
        draft,
        train_recs,
        epochs=plan.draft_epochs,
        batch=plan.draft_batch,
        seed=seed + 3,
        lr=plan.draft_lr,
        time_budget_s=plan.draft_budget_s,
        progress=log,
    )
    lap("draft")

    # 5. Write everything.
    saved_train = train_recs[: plan.n_saved_train]
    staging = Path(tempfile.mkdtemp(prefix=".demo-build-", dir=out))
    try:
        tdir = staging / "target"
        tdir.mkdir()
        tok.save(str(tdir / "tokenizer.json"))
        (tdir / "config.json").write_text(
            json.dumps(tcfg.hf_config(eos_id), indent=2, sort_keys=True) + "\n"
        )
        # The complete HF Llama checkpoint (about 5 MB in float32), so transformers loads it
        # with nothing missing and `eagle-inspect capture` can run it.
        save_file(
            target.hf_state_dict(), str(tdir / "model.safetensors"), metadata={"format": "pt"}
        )
        save_draft(draft, staging / "draft")
        meta = {"generator": "inspector.demo", "seed": seed, "target": "../../target"}
        save_samples(
            staging / "samples" / "train",
            saved_train,
            {**meta, "split": "train (a subset of the draft's training data)"},
        )
        save_samples(
            staging / "samples" / "held", held_recs, {**meta, "split": "held (never trained on)"}
        )
        _install(staging, out)
    except OSError as e:
        raise InputError(
            out, setting_field("out"), f"cannot write the demo: {os_text(e)}"
        ) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    lap("write")

    # 6. Measure what the demo is for: training wiring vs serving wiring.
    figures = {
        name: {
            "train_wiring": evaluate(draft, recs, TRAIN_WIRING),
            "serve_wiring": evaluate(draft, recs, SERVE_WIRING),
        }
        for name, recs in (("train", saved_train), ("held", held_recs))
    }
    masked = [r["input_ids"][r["loss_mask"].bool()] for r in train_recs]
    coverage = float(torch.cat([vocab.t2d[m] for m in masked]).float().mean())
    lap("evaluate")
    total = round(time.perf_counter() - t_start, 1)
    size = sum(
        p.stat().st_size
        for sub in ("target", "draft", "samples/train", "samples/held")
        for p in (out / sub).rglob("*")
        if p.is_file()
    )
    info = {
        "seed": seed,
        "plan": asdict(plan),
        "software": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "stdlib": str(files[0].parent) if files else "",
        },
        "timings_s": {**timings, "total": total},
        "corpus": {
            "files": corpus.n_files,
            "train_documents": len(corpus.train),
            "held_documents": len(corpus.held),
            "train_tokens": int(stream.numel()),
        },
        "target": {**tstats, **tacc, "config": asdict(tcfg)},
        "data": {
            "train_sequences": len(train_recs),
            "held_sequences": len(held_recs),
            "saved_train": len(saved_train),
            "slot_hf_indices": list(SLOT_HF_INDICES),
            "draft_vocab_coverage_train": coverage,
        },
        "draft": dstats,
        "slot_mean_norms": {
            "train": slot_mean_norms(saved_train),
            "held": slot_mean_norms(held_recs),
        },
        "accuracy": figures,
        "assets_bytes": size,
    }
    try:
        (out / "build_info.json").write_text(json.dumps(info, indent=2) + "\n")
    except OSError as e:
        raise InputError(
            out / "build_info.json", setting_field("out"), f"cannot write: {os_text(e)}"
        ) from None
    for name in ("train", "held"):
        f = figures[name]
        log(
            f"{name} samples: step-0 accuracy train wiring {f['train_wiring']['step0']:.1%}, "
            f"serve wiring {f['serve_wiring']['step0']:.1%}; acceptance length "
            f"{f['train_wiring']['acceptance_length']:.2f} vs {f['serve_wiring']['acceptance_length']:.2f}"
        )
    log(
        f"slot mean norms {[round(x, 2) for x in info['slot_mean_norms']['train']]}; assets {size / 1e6:.1f} MB"
    )
    log(f"done in {total:.0f}s -> {out}")
    return info
