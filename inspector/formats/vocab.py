"""The draft <-> target vocabulary map (d2t, t2d): validated strictly, or repaired for the doctor.

Conventions every trainer and engine share: `d2t[i]` is an OFFSET, the target id of draft id `i`
is `i + d2t[i]`; `t2d` is a bool mask over the target vocabulary marking exactly the draft's
tokens, so `nonzero(t2d)` (ascending) equals `arange(D) + d2t`. A draft without either tensor
has the full vocabulary (D = V).
"""

from __future__ import annotations

from pathlib import Path

import torch

from inspector.draft import VocabMap
from inspector.errors import InputError


def integer_ids(wf: Path, name: str, t: torch.Tensor) -> torch.Tensor:
    """A 1-D int64 copy of an id tensor; fractional, non-finite or boolean values are refused."""
    if t.dtype == torch.bool or t.is_complex():
        raise InputError(wf, name, f"dtype {t.dtype}, expected integers")
    flat = t.flatten()
    if flat.is_floating_point():
        bad = ~torch.isfinite(flat) | (flat != flat.round())
        if bool(bad.any()):
            i = int(bad.nonzero()[0])
            raise InputError(wf, name, f"holds a non-integer value {float(flat[i])} at index {i}")
    return flat.long()


def mask_of(wf: Path, name: str, t: torch.Tensor) -> torch.Tensor:
    """A 1-D bool copy of a 0/1 mask; any other value is refused (not read as True)."""
    flat = t.flatten()
    if flat.dtype != torch.bool:
        bad = (flat != 0) & (flat != 1)
        if bool(bad.any()):
            i = int(bad.nonzero()[0])
            raise InputError(wf, name, f"holds {flat[i].item()} at index {i}: expected 0 or 1")
    return flat.bool()


def vocab_map(
    d2t: torch.Tensor | None,
    t2d: torch.Tensor | None,
    d: int,
    v: int,
    wf: Path,
    *,
    strict: bool = True,
    notes: list[str] | None = None,
) -> VocabMap:
    """The VocabMap from stored d2t (offsets) and t2d, validated.

    No map at all with draft_vocab_size D < vocab_size V is read as the first D target ids, as an
    engine without a map reads the head's rows, strict or not (a full-vocabulary head beside a
    padded V is no fault of the draft; the doctor's vocab_contract finding says whether the D ids
    are the target's whole real vocabulary or a missing map).

    Lenient (strict=False, the doctor): a d2t equal to nonzero(t2d), or out of range as offsets
    but valid as ids, is read as absolute ids; a t2d that disagrees with a valid d2t is rebuilt
    from d2t (the engines read d2t only). What was done is appended to `notes`.
    """
    d2t = integer_ids(wf, "d2t", d2t) if d2t is not None else None
    t2d = mask_of(wf, "t2d", t2d) if t2d is not None else None
    if not strict and d2t is not None:
        lenient = _lenient(d2t, t2d, d, v, notes if notes is not None else [])
        if lenient is not None:
            return lenient
    if d2t is None and t2d is None:
        if d < v:  # strict too: what the doctor clears (a full head, padded V), eval must read
            if notes is not None:
                notes.append(
                    f"no d2t/t2d while draft_vocab_size {d} < vocab_size {v}: read as target ids "
                    f"0..{d - 1}"
                )
            t2d = torch.zeros(v, dtype=torch.bool)
            t2d[:d] = True
            return VocabMap(d2t=torch.zeros(d, dtype=torch.long), t2d=t2d)
        if d > v:
            raise InputError(wf, "d2t", f"absent but draft_vocab_size {d} > vocab_size {v}")
        return VocabMap.identity(v)
    if d2t is None:
        raise InputError(wf, "d2t", "absent while t2d is present")
    if d2t.numel() != d:
        raise InputError(wf, "d2t", f"has {d2t.numel()} entries, expected draft_vocab_size {d}")
    target_ids = torch.arange(d) + d2t
    if int(target_ids.min()) < 0 or int(target_ids.max()) >= v:
        raise InputError(
            wf,
            "d2t",
            f"maps draft ids to target ids outside [0, {v}) (offsets expected: target = draft + d2t)",
        )
    if t2d is None:
        t2d = torch.zeros(v, dtype=torch.bool)
        t2d[target_ids] = True
    if t2d.numel() != v:
        raise InputError(wf, "t2d", f"has {t2d.numel()} entries, expected vocab_size {v}")
    if int(t2d.sum()) != d:
        raise InputError(wf, "t2d", f"marks {int(t2d.sum())} tokens, expected draft_vocab_size {d}")
    if not torch.equal(t2d.nonzero().flatten(), target_ids):
        raise InputError(wf, "d2t", "disagrees with t2d: nonzero(t2d) != arange(D) + d2t")
    return VocabMap(d2t=d2t, t2d=t2d)


def _lenient(
    d2t: torch.Tensor, t2d: torch.Tensor | None, d: int, v: int, notes: list[str]
) -> VocabMap | None:
    """A usable VocabMap from a faulty d2t/t2d, or None to fall back to the strict checks."""
    if d2t.numel() != d:
        return None
    ids_from_t2d = t2d.nonzero().flatten() if t2d is not None and t2d.numel() == v else None
    as_offsets = torch.arange(d) + d2t
    offsets_ok = (
        bool(((as_offsets >= 0) & (as_offsets < v)).all()) and as_offsets.unique().numel() == d
    )
    absolute_ok = bool(((d2t >= 0) & (d2t < v)).all()) and d2t.unique().numel() == d
    if offsets_ok and (ids_from_t2d is None or torch.equal(ids_from_t2d, as_offsets)):
        return None  # consistent offsets: the strict path accepts them
    if absolute_ok and (
        (ids_from_t2d is not None and torch.equal(ids_from_t2d, d2t)) or not offsets_ok
    ):
        notes.append("d2t holds absolute target ids, not offsets: read as ids")
        target_ids = d2t
    elif offsets_ok:
        notes.append("t2d disagrees with d2t: rebuilt from d2t (engines read d2t only)")
        target_ids = as_offsets
    else:
        return None
    new_t2d = torch.zeros(v, dtype=torch.bool)
    new_t2d[target_ids] = True
    return VocabMap(d2t=target_ids - torch.arange(d), t2d=new_t2d)
