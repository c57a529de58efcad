"""Check: a draft that ships no `lm_head.weight`, and what each engine then uses as its head.

Some drafts are meant to borrow the target's head; others lost theirs in an export. What serving
does with either:
- SGLang loads the target's lm_head only when the config has no `draft_vocab_size`; with one
  (and `tie_word_embeddings` false) its fresh head stays at random init and every draft token is
  rejected (sglang#27908: Kimi-K2.6-Eagle3, accept length 1.00; the loader warns only about
  unexpected weights, never about missing ones);
- vLLM shares the target's lm_head with a draft that ships none (and, before vllm#28549, replaced
  every draft's own head with the target's: vllm#27732, 1.32 accepted tokens instead of 2.49).

With the target, the doctor scores the draft with the target's head rows for the draft vocab
(target ids arange(D) + d2t, the rows speculators initialises a draft head from), by loading a
temporary copy of the draft that holds them; without it, the check says what it needs instead of
failing on the missing tensor. Evidence: the config keys that decide the engines' choice, and
(with the target) where the borrowed rows came from. Fix: ship the head, or serve where the
target's head is used.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from inspector.doctor.finding import Finding, Kind, Severity
from inspector.doctor.phrasing import Text
from inspector.doctor.stats import clearly_better, counts_of
from inspector.draft import Draft
from inspector.engines import Engine
from inspector.errors import InputError
from inspector.evaluate import Evaluator
from inspector.formats.checkpoint import canonical_name
from inspector.formats.tensorfiles import find_weight_file, read_json, read_tensors, tensor_names
from inspector.metrics import Counts

# the engines' names from the registry (a rename is one edit in inspector/engines/)
_SGLANG, _VLLM = (
    Engine.SGLANG.display,
    Engine.VLLM.display,
)

HEAD = "lm_head.weight"


def _key(cfg: dict, key: str) -> object:
    """A key at the top level, else in speculators' transformer_layer_config."""
    if key in cfg:
        return cfg[key]
    layer = cfg.get("transformer_layer_config")
    return layer.get(key) if isinstance(layer, dict) else None


@dataclass(frozen=True)
class HeadStatus:
    """What the checkpoint holds and states about its head.

    draft_vocab_size: as config.json states it (None: absent, so SGLang loads the target's head).
    """

    checkpoint: str
    weight_file: str
    present: bool
    tied: bool
    reuse_target: bool
    draft_vocab_size: int | None
    vocab_size: int | None
    has_embedding: bool
    has_d2t: bool
    hidden_size: int | None = None

    @property
    def sglang_random(self) -> bool:
        """SGLang keeps a randomly initialised head: a draft vocab is stated and nothing ties."""
        return not self.present and self.draft_vocab_size is not None and not self.tied

    def to_dict(self) -> dict:
        return {
            "weight_file": self.weight_file,
            "lm_head_present": self.present,
            "tie_word_embeddings": self.tied,
            "reuse_target_lm_head": self.reuse_target,
            "draft_vocab_size": self.draft_vocab_size,
            "vocab_size": self.vocab_size,
        }


def head_status(checkpoint: str | Path) -> HeadStatus | None:
    """The head facts of a draft folder, from its config and tensor names (no data read); None
    when the folder cannot be read (loading the draft then names the problem)."""
    folder = Path(checkpoint)
    folder = folder.parent if folder.is_file() else folder
    try:
        cfg = read_json(folder / "config.json")
        wf = find_weight_file(folder)
        names = {canonical_name(n) for n in tensor_names(wf)}
    except InputError:
        return None
    dvs, vs, hs = _key(cfg, "draft_vocab_size"), _key(cfg, "vocab_size"), _key(cfg, "hidden_size")
    return HeadStatus(
        str(folder),
        str(wf),
        HEAD in names,
        _key(cfg, "tie_word_embeddings") is True,
        _key(cfg, "reuse_target_lm_head") is True,
        dvs if type(dvs) is int else None,
        vs if type(vs) is int else None,
        "embed_tokens.weight" in names,
        "d2t" in names,
        hs if type(hs) is int else None,
    )


@dataclass(frozen=True)
class HeadFacts:
    """The head check's evidence: the status, and where the head scored with came from."""

    status: HeadStatus
    borrowed_from: str | None = None  # the target folder whose head rows were used

    def to_dict(self) -> dict:
        return {**self.status.to_dict(), "scored_with_head_from": self.borrowed_from}


def head_finding(status: HeadStatus, borrowed_from: str | None = None) -> Finding:
    """error when SGLang would serve a random head, else a warning: the draft depends on the
    engine to supply its head."""
    text = head_text(status, borrowed_from)
    severity = Severity.ERROR if status.sglang_random else Severity.WARNING
    return Finding(Kind.LM_HEAD, severity, text.summary, text.fix, HeadFacts(status, borrowed_from))


def borrow_target_head(status: HeadStatus, target: str | Path, out: Path) -> Path:
    """A copy of the draft in `out` whose lm_head is the target's rows for the draft vocab
    (arange(D) + d2t; all rows when D = V and no d2t), or the draft's own embedding when the
    config ties them. Returns the copy's folder."""
    from safetensors.torch import save_file

    from inspector.formats.target_tensors import read_target_lm_head

    src = Path(status.checkpoint)
    weights = {k: v for k, v in read_tensors(Path(status.weight_file)).items()}
    canon = {canonical_name(k): k for k in weights}
    if status.tied and "embed_tokens.weight" in canon:
        # a copy: safetensors refuses to save two names over one storage
        head = weights[canon["embed_tokens.weight"]].clone()
    else:
        full = read_target_lm_head(Path(target))
        if status.hidden_size is not None and full.shape[1] != status.hidden_size:
            raise InputError(
                status.weight_file,
                HEAD,
                f"absent, and the target's lm_head is {full.shape[1]} wide for a draft of hidden "
                f"size {status.hidden_size}: it cannot be borrowed",
            )
        d = status.draft_vocab_size or full.shape[0]
        ids = torch.arange(d)
        if "d2t" in canon:
            ids = ids + weights[canon["d2t"]].long()[:d]
        if d > full.shape[0] or int(ids.min()) < 0 or int(ids.max()) >= full.shape[0]:
            raise InputError(
                status.weight_file, "d2t", "maps draft ids outside the target's lm_head rows"
            )
        head = full[ids]
    weights[HEAD] = head.contiguous()
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(src / "config.json", out / "config.json")
    save_file({k: v.contiguous() for k, v in weights.items()}, str(out / "model.safetensors"))
    return out


@dataclass(frozen=True)
class HeadComparison:
    """The draft's own head against the target's rows for the draft vocab, on one wiring."""

    own: Counts
    target: Counts
    target_clearly_better: bool
    own_clearly_better: bool
    target_path: str

    def to_dict(self) -> dict:
        return {
            "own_head": self.own.to_dict(),
            "target_head": self.target.to_dict(),
            "target_clearly_better": self.target_clearly_better,
            "own_clearly_better": self.own_clearly_better,
            "target": self.target_path,
        }


def compare_heads(
    ev: Evaluator,
    samples: Sequence[int],
    wiring: tuple[int, ...],
    target_head: torch.Tensor,
    target_path: str,
    *,
    shift: int = 0,
    draft: Draft | None = None,
) -> Finding | None:
    """Score `wiring` with the draft's own head and with `target_head` [V, H] restricted to the
    draft vocab: what vLLM served before vllm#28549, which replaced every draft's head. None when
    the target's head has another width than the draft's hidden size (no engine can swap it)."""
    from inspector.doctor.checks.norm_flags import draft_hits

    draft = draft if draft is not None else ev.draft
    if target_head.shape[-1] != draft.config.hidden_size or HEAD not in draft.weights:
        return None
    rows = draft.vocab.draft_to_target.to(target_head.device)
    theirs = target_head[rows].to(draft.device, draft.dtype)
    borrowed = replace(draft, weights={**draft.weights, HEAD: theirs})
    own = draft_hits(ev, samples, draft, wiring, shift)
    alt = draft_hits(ev, samples, borrowed, wiring, shift)
    facts = HeadComparison(
        counts_of(own),
        counts_of(alt),
        bool(clearly_better(alt, own)),
        bool(clearly_better(own, alt)),
        target_path,
    )
    text = head_comparison_text(facts)
    severity = Severity.WARNING if facts.target_clearly_better else Severity.INFO
    return Finding(Kind.LM_HEAD, severity, text.summary, text.fix, facts)


# --- words ---------------------------------------------------------------------------------------
def head_text(status: HeadStatus, borrowed_from: str | None) -> Text:
    """A draft that ships no lm_head: what its config states, what each engine loads."""
    dvs = status.draft_vocab_size
    keys = [
        f"draft_vocab_size {dvs}" if dvs is not None else "no draft_vocab_size",
        f"tie_word_embeddings {str(status.tied).lower()}",
    ]
    if status.reuse_target:
        keys.append("reuse_target_lm_head true")
    if status.tied:
        sglang = f"{_SGLANG} and {_VLLM} tie it to the embedding"
    elif dvs is not None:
        sglang = Engine.SGLANG.says("no_head_sized")
    else:
        sglang = Engine.SGLANG.says("no_head_unsized")
    vllm = Engine.VLLM.says("no_head")
    summary = f"the draft ships no lm_head.weight ({', '.join(keys)}): {sglang}; {vllm}"
    if borrowed_from is not None:
        rows = "its embedding" if status.tied else "the target's lm_head rows for the draft vocab"
        summary += f". Every other finding scores the draft with {rows} ({borrowed_from})"
        fix = (
            "if the draft was trained with its own head, ship lm_head.weight; if it borrows the "
            f"target's, serve it with {_VLLM}"
            + (
                f"; {Engine.SGLANG.says('random_head')}"
                + (
                    " (removing draft_vocab_size, which equals vocab_size, makes it load the "
                    "target's)"
                    if dvs == status.vocab_size
                    else ""
                )
                if status.sglang_random
                else ""
            )
        )
    else:
        summary += ". The other checks need a head to score the draft: none ran"
        fix = (
            "pass --target DIR (the doctor then scores the draft with the target's head), or "
            "ship the draft's own lm_head.weight [draft_vocab_size, hidden_size]"
        )
    return Text(summary, fix)


def head_comparison_text(facts: HeadComparison) -> Text:
    """The draft's own head against the target's rows for the draft vocab."""
    scores = (
        f"the draft's own lm_head scores {facts.own.fmt()}, the target's rows for the draft vocab "
        f"{facts.target.fmt()}"
    )
    if facts.target_clearly_better:
        return Text(
            f"{scores}: the draft was trained with the target's head, not the one it ships",
            "ship the target's rows as lm_head.weight (arange(D) + d2t of the target's lm_head), "
            f"or serve with {Engine.VLLM.says('shared_head')}",
        )
    tail = ""
    if facts.own_clearly_better:
        tail = (
            "; an engine that replaces a draft's head with the target's "
            f"({Engine.VLLM.says('replaced_head')}) serves the lower figure"
        )
    return Text(f"{scores}{tail}")
