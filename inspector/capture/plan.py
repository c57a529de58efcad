"""Which slots a capture writes: from ``--layers``, from the draft's config (``auto``), or as a
serving engine would feed the draft (``--engine``).

Slots are HF ``output_hidden_states`` indices (0 = embedding output, k = output of decoder layer
k-1, L = the last layer's output before the final norm) plus, on request, the final post-norm
state. The last slot is always HF index L, the verifier's last state, as speculators v1 files
keep it (the inspector rebuilds the target's logits from it through the final norm + lm_head);
the post-norm slot, when asked for, sits just before it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from inspector.capture.conventions import EngineCapture, engine_capture, trainer_hf_indices
from inspector.errors import InputError, setting_field

POST_NORM = "post-norm"
Slot = int | str  # an HF index, or POST_NORM


@dataclass(frozen=True)
class SlotPlan:
    """The slots of every sample, in file order, and how they were chosen."""

    slots: tuple[Slot, ...]
    num_layers: int
    how: str  # "layers" | "auto" | "engine"
    notes: tuple[str, ...] = ()
    engine: EngineCapture | None = None
    fc_blocks: int | None = None  # the draft's fc width in slots, when a draft was given

    @property
    def hf_indices(self) -> list[int]:
        return sorted({s for s in self.slots if isinstance(s, int)})

    def labels(self) -> list[str]:
        last = len(self.slots) - 1
        out = []
        for i, s in enumerate(self.slots):
            if s == POST_NORM:
                out.append("final norm output (post-norm)")
            elif s == 0:
                out.append("embedding output")
            elif i == last:
                out.append(f"layer {s} output (pre-norm, verifier last state)")
            else:
                out.append(f"layer {s} output" + (" (pre-norm)" if s == self.num_layers else ""))
        return out

    def to_dict(self) -> dict:
        d: dict = {"slots": list(self.slots), "how": self.how, "notes": list(self.notes)}
        if self.engine is not None:
            e = self.engine
            d["engine"] = {
                "name": e.engine,
                "configured_ids": list(e.configured) if e.configured is not None else None,
                "source": e.source,
                "hf_indices": list(e.hf_indices),
                "fc_slots": list(range(len(e.hf_indices))),
                "notes": list(e.notes),
            }
        return d


@dataclass(frozen=True)
class DraftIds:
    """What the capture needs from a draft: its configured aux ids, their convention, fc width."""

    path: Path
    aux_ids: tuple[int, ...] | None
    convention: str | None
    fc_blocks: int
    config_path: Path = field(default=Path("config.json"))


def read_draft_ids(draft: str | Path, target: str | Path) -> DraftIds:
    """The draft's configured aux ids as the checkpoint loader records them (``target`` supplies the
    embedding a SpecForge export lacks)."""
    from inspector.formats.checkpoint import load_draft

    # Lenient: a faulty vocab map or head_dim (which the doctor reports) does not change the ids.
    d = load_draft(draft, target=target, strict=False)
    folder = Path(d.path)
    return DraftIds(
        folder,
        d.config.aux_layer_ids,
        d.config.aux_layer_convention,
        d.config.num_fc_blocks,
        folder / "config.json",
    )


def _check_index(k: int, L: int) -> int:
    if k < 0 or k > L:
        raise InputError(
            None,
            setting_field("layers"),
            f"HF index {k} is outside 0..{L} (0 = embedding, {L} = last layer before the norm)",
        )
    return k


def _assemble(fc: list[int], L: int, post_norm: bool) -> tuple[Slot, ...]:
    slots: list[Slot] = list(fc)
    if post_norm:
        slots.append(POST_NORM)
    slots.append(L)
    return tuple(slots)


def plan_slots(
    num_layers: int,
    *,
    layers: str | None = None,
    draft: DraftIds | None = None,
    engine: str | None = None,
) -> SlotPlan:
    """The slot plan for ``--layers`` / ``--draft`` / ``--engine``.

    ``layers``: comma list of HF indices, ``auto`` (the draft's configured ids read in its layout's
    convention) and ``post-norm``; None means ``auto`` with a draft that names its ids, else the
    engines' default ``2, L//2, L-3`` plus L. Index L always ends the list (appended when missing).
    """
    L = num_layers
    fc_blocks = draft.fc_blocks if draft is not None else None
    if engine is not None:
        if draft is None:
            raise InputError(
                None, setting_field("engine"), "needs --draft CKPT (the engine reads its config)"
            )
        if layers is not None:
            raise InputError(
                None, setting_field("layers"), "--engine decides the slots: drop --layers"
            )
        cap = engine_capture(engine, draft.aux_ids, draft.convention, L)
        problem = cap.problem(draft.fc_blocks)
        if problem:
            raise InputError(draft.config_path, "eagle_aux_hidden_state_layer_ids", problem)
        return SlotPlan(
            _assemble(list(cap.hf_indices), L, False),
            L,
            "engine",
            notes=(cap.source, *cap.notes),
            engine=cap,
            fc_blocks=fc_blocks,
        )
    if layers is None and (draft is None or not draft.aux_ids):
        why = "the draft's config names no aux ids: " if draft is not None else ""
        return SlotPlan(
            _assemble(sorted({k for k in (2, L // 2, L - 3) if 0 <= k < L}), L, False),
            L,
            "layers",
            notes=(f"{why}default layers HF 2, L//2, L-3 and L = {L}",),
            fc_blocks=fc_blocks,
        )
    parts = ["auto"] if layers is None else None
    parts = parts or [p.strip().lower() for p in str(layers).split(",") if p.strip()]
    if not parts:
        raise InputError(None, setting_field("layers"), "empty")
    post_norm = POST_NORM in parts
    notes: list[str] = []
    if "auto" in parts:
        if draft is None:
            raise InputError(None, setting_field("layers"), "auto needs --draft CKPT")
        if not draft.aux_ids:
            raise InputError(
                draft.config_path,
                "eagle_aux_hidden_state_layer_ids",
                f"absent, so --layers auto has nothing to read: pass --layers, e.g. "
                f"2,{L // 2},{L - 3},{L} (the engines' default)",
            )
        fc = [_check_index(k, L) for k in trainer_hf_indices(draft.aux_ids, draft.convention)]
        notes.append(
            f"auto: the draft's ids {list(draft.aux_ids)} ({draft.convention} convention) are "
            f"HF {fc}; HF {L} is the verifier's last state"
        )
        extra = [p for p in parts if p not in ("auto", POST_NORM)]
        if extra:
            raise InputError(
                None, setting_field("layers"), f"auto takes only post-norm besides it, not {extra}"
            )
        return SlotPlan(
            _assemble(sorted(fc), L, post_norm), L, "auto", tuple(notes), fc_blocks=fc_blocks
        )
    ids: set[int] = set()
    for p in parts:
        if p == POST_NORM:
            continue
        try:
            ids.add(_check_index(int(p), L))
        except ValueError:
            raise InputError(
                None, setting_field("layers"), f"{p!r} is not an HF index, auto or post-norm"
            ) from None
    if L not in ids:
        notes.append(f"HF {L} (the last layer, pre-norm) appended as the verifier's last state")
    return SlotPlan(
        _assemble(sorted(ids - {L}), L, post_norm), L, "layers", tuple(notes), fc_blocks=fc_blocks
    )
