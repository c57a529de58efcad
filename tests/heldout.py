"""A bed of HELD-OUT drafts trained here (imported as `heldout`): drafts on wirings, norm flags
and a target the bundled demo never shows, so a test can ask whether the doctor is right on
drafts it has never seen, not only on the demo it was written against.

Two targets:
- the demo's (6 layers; its samples hold HF [0, 2, 4, 6]);
- a SECOND target built here by the demo's own builder code (`inspector.demo`: the stdlib corpus
  through the demo's tokenizer, `train_target`, `make_sequences`, `capture_slots`,
  `save_samples`) with another seed, 8 layers and hidden size 64, its samples holding EVERY layer
  (HF 0..8, data_config.json's `layer_ids`), laid out as the demo is (`target/` an HF Llama
  folder: config.json, model.safetensors, tokenizer.json; `samples/train`).

Drafts (`CASES`) are trained with `trained_shapes.train_shape` (TTT step 0 only, 12 epochs, as
the doctor's tests in test_draft_shapes.py train theirs): enough for the trained wiring to stand
above the others at step 0. `build_bed(root)` builds everything and returns the table of
`HeldOutDraft`s; the session fixtures are in heldout_fixtures.py. Deterministic: the same seeds
and thread count (the build pins one thread) give the same files.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import save_file
from trained_shapes import Shape, train_shape

from inspector.demo_paths import DemoPaths

THREADS = (
    1  # pinned during the build: the bits depend on it (and one thread beats two on a busy box)
)
EPOCHS = 12  # the demo's drafts: as test_draft_shapes.py trains its shapes
TTT = 1


@dataclass(frozen=True)
class TargetPlan:
    """The second target: 8 decoder layers grown from the demo target's 6 (`layer_sources`: the
    demo layer each starts from; 1 and 4 twice), then trained further by the demo's trainer with
    another seed on the demo's corpus. A target trained from scratch in the seconds a test bed
    has (200 steps, hidden 64: loss 3.1) writes degenerate loops, predictable from the token
    alone, so drafts trained on its states fit every wiring alike; this one's states carry the
    context, as a real target's do."""

    seed: int = 11
    layer_sources: tuple[int, ...] = (0, 1, 1, 2, 3, 4, 4, 5)
    max_files: int = 40  # the first stdlib files of the demo corpus
    steps: int = 40
    batch: int = 16
    seq_len: int = 64
    lr: float = 1e-3
    n_samples: int = 48
    prompt_len: tuple[int, int] = (16, 40)
    total_len: tuple[int, int] = (112, 144)
    temperature: float = 0.7  # the demo's
    prompt_docs: str = "held"  # prompts cut from documents it never trained on ("train": those)

    @property
    def num_layers(self) -> int:
        return len(self.layer_sources)


def grown_target(demo: DemoPaths, plan: TargetPlan):
    """The demo target with its layers repeated as `plan.layer_sources` says (a TargetConfig of
    that many layers, every weight the demo's)."""
    from dataclasses import replace

    from safetensors.torch import load_file

    from inspector.demo.tiny_target import Target, TargetConfig

    cfg = json.loads((demo.target / "config.json").read_text())
    fields = TargetConfig.__dataclass_fields__
    tcfg = replace(
        TargetConfig(**{k: v for k, v in cfg.items() if k in fields}),
        num_hidden_layers=plan.num_layers,
    )
    w = load_file(str(demo.target / "model.safetensors"))
    state = {}
    for k, v in w.items():
        name = k.removeprefix("model.")
        if not name.startswith("layers."):
            state[name] = v
            continue
        _, src, rest = name.split(".", 2)
        for i, s in enumerate(plan.layer_sources):
            if s == int(src):
                state[f"layers.{i}.{rest}"] = v.clone()
    model = Target(tcfg)
    model.load_state_dict(state)
    return model, tcfg


def build_second_target(root: Path, demo: DemoPaths, plan: TargetPlan = TargetPlan()) -> DemoPaths:
    """The second target and its every-layer samples under `root` (root/target, root/samples/
    train), as the demo lays them out; returns their paths (DemoPaths, so `train_shape` takes it).
    The tokenizer is the demo's (copied), the rest the demo builder's code under `plan`."""
    from tokenizers import Tokenizer

    from inspector.demo.corpus import load_corpus, stdlib_files
    from inspector.demo.data import capture_slots, make_sequences, save_samples, slot_labels
    from inspector.demo.tiny_target import train_target
    from inspector.demo.tokenizer import EOS, encode_documents

    tok = Tokenizer.from_file(str(demo.tokenizer))
    eos_id = tok.token_to_id(EOS)
    corpus = load_corpus(stdlib_files(), max_files=plan.max_files)
    train_docs = encode_documents(tok, corpus.train)
    held_docs = encode_documents(tok, corpus.held)
    stream = torch.tensor([t for d in train_docs for t in (*d, eos_id)], dtype=torch.long)
    newline_ids = {i for s, i in tok.get_vocab().items() if "Ċ" in s}
    init, cfg = grown_target(demo, plan)
    target, _ = train_target(
        stream,
        cfg,
        steps=plan.steps,
        batch=plan.batch,
        seq_len=plan.seq_len,
        seed=plan.seed,
        lr=plan.lr,
        init=init,
    )
    seqs = make_sequences(
        target,
        train_docs if plan.prompt_docs == "train" else held_docs,
        plan.n_samples,
        newline_ids=newline_ids,
        eos_id=eos_id,
        seed=plan.seed + 1,
        prompt_len=plan.prompt_len,
        total_len=plan.total_len,
        temperature=plan.temperature,
        batch=plan.n_samples,
    )
    layer_ids = list(range(plan.num_layers + 1))
    records = [
        {
            "input_ids": s.ids,
            "hidden_states": [h.to(torch.bfloat16) for h in capture_slots(target, s, layer_ids)],
            "loss_mask": s.loss_mask,
        }
        for s in seqs
    ]
    paths = DemoPaths(root)
    tdir = paths.target
    tdir.mkdir(parents=True)
    shutil.copyfile(demo.tokenizer, tdir / "tokenizer.json")
    (tdir / "config.json").write_text(
        json.dumps(cfg.hf_config(eos_id), indent=2, sort_keys=True) + "\n"
    )
    save_file(target.hf_state_dict(), str(tdir / "model.safetensors"), metadata={"format": "pt"})
    meta = {
        "generator": "inspector.demo (tests/heldout.py)",
        "seed": plan.seed,
        "target": "../../target",
        "split": "train (the held-out drafts' training data)",
    }
    save_samples(
        paths.train_samples, records, meta, layer_ids, slot_labels(layer_ids, plan.num_layers)
    )
    return paths


@dataclass(frozen=True)
class Case:
    """One held-out draft to train: its shape (config ids, trained slots, flags; see
    trained_shapes.Shape), the target it is trained on ("demo" or "second"), its seed."""

    shape: Shape
    on: str
    seed: int
    # the second target's neighbouring layers differ less than the demo's slots: at 12 epochs
    # its drafts fit several wirings within a hit or two (measured), at 20 the trained one leads
    epochs: int = EPOCHS


DEMO, SECOND = "demo", "second"
# The demo's slots are HF [0, 2, 4, 6]; the second target's slot k is HF k (0..8).
CASES = {
    c.shape.name: c
    for c in (
        Case(Shape("demo-nbr", (0, 2, 4), (0, 1, 2), norm_before_residual=True), DEMO, 1),
        Case(Shape("demo-no-nbr", (0, 2, 4), (0, 1, 2)), DEMO, 2),
        Case(Shape("demo-fcnorm", (0, 2, 4), (0, 1, 2), fc_norm=True), DEMO, 3),
        # trained on [L4, embed, L2]: its ids as listed (speculators writes the ids it is given,
        # and an HF capture `[hidden_states[i] for i in ids]` keeps their order); engines
        # capture in ascending order, so none can feed it
        Case(Shape("demo-permuted", (4, 0, 2), (2, 0, 1)), DEMO, 4),
        Case(Shape("second-adjacent", (2, 3, 4), (2, 3, 4)), SECOND, 5, 20),
        Case(Shape("second-spread", (0, 3, 6), (0, 3, 6)), SECOND, 6, 20),
        Case(Shape("second-nbr", (1, 4, 7), (1, 4, 7), norm_before_residual=True), SECOND, 7, 20),
    )
}


@dataclass(frozen=True)
class HeldOutDraft:
    """A trained held-out draft: where it is and what it was trained on.

    trained_hf: the trained wiring as HF indices (fc block order); trained_wiring: the same as
    slot indices into its samples; config_ids: its config.json's eagle_aux_hidden_state_layer_ids
    (HF indices); slot_hf: the samples' slots as HF indices; flags: its config's norm flags."""

    name: str
    target: Path
    samples: Path
    checkpoint: Path
    trained_hf: tuple[int, ...]
    trained_wiring: tuple[int, ...]
    config_ids: tuple[int, ...]
    slot_hf: tuple[int, ...]
    on: str
    flags: dict[str, bool] = field(default_factory=dict)

    @property
    def ascending(self) -> bool:
        """An engine can feed the trained wiring (it captures layers in ascending order)."""
        return list(self.trained_hf) == sorted(self.trained_hf)

    @property
    def serve_ids(self) -> tuple[int, ...]:
        """The last N captured layers' HF indices (the `serve` preset): the ids a config
        rewritten for serving names."""
        return self.slot_hf[-len(self.trained_hf) :]


def slot_hf_of(samples: Path) -> tuple[int, ...]:
    cfg = json.loads((samples / "data_config.json").read_text())
    return tuple(int(k) for k in cfg["hidden_states"]["layer_ids"])


def held_out_draft(case: Case, paths: DemoPaths, checkpoint: Path) -> HeldOutDraft:
    s = case.shape
    slot_hf = slot_hf_of(paths.train_samples)
    flags = {
        k: getattr(s, k)
        for k in ("fc_norm", "norm_before_fc", "norm_output", "norm_before_residual")
    }
    return HeldOutDraft(
        s.name,
        paths.target,
        paths.train_samples,
        checkpoint,
        tuple(slot_hf[k] for k in s.wiring),
        s.wiring,
        s.ids,
        slot_hf,
        case.on,
        flags,
    )


def with_ids(d: HeldOutDraft, ids: tuple[int, ...], out: Path) -> Path:
    """A copy of d's checkpoint whose config names `ids` (a draft configured for other layers)."""
    shutil.copytree(d.checkpoint, out)
    cfg = json.loads((out / "config.json").read_text())
    cfg["eagle_aux_hidden_state_layer_ids"] = list(ids)
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    return out


@dataclass
class Bed:
    second: DemoPaths
    drafts: dict[str, HeldOutDraft]
    seconds: dict[str, float]  # build wall time per stage


def build_bed(
    root: Path, demo: DemoPaths, plan: TargetPlan = TargetPlan(), cases: dict = CASES
) -> Bed:
    """The second target and every case's draft under `root` (one thread pinned, restored)."""
    before = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    seconds: dict[str, float] = {}
    try:
        t = time.perf_counter()
        second = build_second_target(root / "second", demo, plan)
        seconds["second_target"] = time.perf_counter() - t
        drafts = {}
        for name, case in cases.items():
            t = time.perf_counter()
            paths = demo if case.on == DEMO else second
            folder = train_shape(
                case.shape, paths, root / "drafts", epochs=case.epochs, ttt=TTT, seed=case.seed
            )
            drafts[name] = held_out_draft(case, paths, folder)
            seconds[name] = time.perf_counter() - t
    finally:
        torch.set_num_threads(before)
    return Bed(second, drafts, seconds)


if __name__ == "__main__":
    import sys
    import tempfile

    from inspector.demo_paths import demo_paths

    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="heldout-"))
    t0, c0 = time.perf_counter(), time.process_time()
    bed = build_bed(out, demo_paths())
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    for k, v in bed.seconds.items():
        print(f"{k:>18} {v:6.1f}s")
    print(f"heldout.py: built in {wall:.1f}s wall, {cpu:.1f}s CPU -> {out}")
