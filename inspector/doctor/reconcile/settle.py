"""Which wiring a verdict may name as the trained one: never more than its evidence.

Three witnesses bear on it, each stated in the verdict:

- the step-0 search (`trained_wiring`): every wiring scored on the same positions; the top one
  beats another *clearly* only by the paired test and margin of `doctor.stats`;
- the replays: each contender's accept length over the same requests, paired by request, with a
  bootstrap interval (`stats.bootstrap`, requests as the unit); a replay favours a wiring only
  when the interval of the difference excludes zero;
- the fc fingerprint (`fingerprint`): the projected norm of each fc block under the configured
  wiring against the top one's, flagged when off by more than its ratio.

Adjacent layers of a residual stream carry nearly the same information, so a neighbour of the
trained wiring may replay a few hundredths higher on a few requests by chance: that is noise,
never a finding. The rule:

1. the configured wiring stands when no witness clearly prefers another (the step-0 search does
   not clearly beat it, no replay is clearly higher, the fingerprint does not flag it); the
   wirings within noise of it are named as those the evidence cannot tell apart;
2. otherwise the step-0 top is the trained wiring, unless a replay is clearly higher than the
   top's (several drafting steps settle what step 0 cannot), which then is;
3. when witnesses clearly prefer different wirings (the step-0 search beats the configured one,
   its replay clearly beats the top's), the answer is undecided, with what would settle it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from inspector.stats.bootstrap import PairedDiff, Resampler

# per request: (accepted, rounds) of a replay, by sample index
RequestCounts = Mapping[int, tuple[int, int]]


@dataclass(frozen=True)
class Witness:
    """One piece of evidence on the trained wiring, and what it prefers (None: it cannot tell)."""

    name: str  # "step-0 search" | "replays" | "fc fingerprint"
    says: str
    prefers: tuple[int, ...] | None = None

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "says": self.says,
            "prefers": list(self.prefers) if self.prefers is not None else None,
        }


@dataclass(frozen=True)
class Settlement:
    """The trained wiring as the evidence settles it.

    wiring: the wiring the verdict names as trained (None: undecided).
    configured_stands: the configured wiring is that wiring because nothing clearly beats it.
    indistinct: the wirings the evidence cannot tell from it (within noise).
    witnesses: every witness, in the order above.
    undecided: why no wiring is named, and what would settle it (None: one is).
    """

    wiring: tuple[int, ...] | None
    configured_stands: bool
    indistinct: tuple[tuple[int, ...], ...]
    witnesses: tuple[Witness, ...]
    undecided: str | None = None

    @property
    def ambiguous(self) -> bool:
        """The configured wiring is beaten, but no witness tells the wiring named from its
        neighbours: a fix names them all, never one of them alone."""
        return self.wiring is not None and not self.configured_stands and bool(self.indistinct)

    def agreeing(self) -> list[str]:
        """The witnesses that prefer the settled wiring."""
        return [
            w.name for w in self.witnesses if w.prefers is not None and w.prefers == self.wiring
        ]

    def to_dict(self) -> dict:
        return {
            "wiring": list(self.wiring) if self.wiring is not None else None,
            "configured_stands": self.configured_stands,
            "indistinct": [list(w) for w in self.indistinct],
            "witnesses": [w.to_dict() for w in self.witnesses],
            "undecided": self.undecided,
            "ambiguous": self.ambiguous,
        }


def replay_diff(
    a: RequestCounts, b: RequestCounts, *, seed: int = 0, resamples: int = 2000
) -> PairedDiff:
    """B - A of the pooled accepted / rounds (the accept length less its 1) over the requests
    both replayed, paired by request, with its 95% bootstrap interval."""
    keys = sorted(set(a) & set(b))
    rs = Resampler(len(keys), resamples=resamples, seed=seed)
    arr = [np.array([c[k][j] for k in keys], dtype=np.float64) for c in (a, b) for j in (0, 1)]
    return rs.ratio_diff(arr[0], arr[1], arr[2], arr[3])


def settle(
    top: tuple[int, ...],
    contenders: Sequence[tuple[int, ...]],
    configured: tuple[int, ...] | None,
    step0_clearly: bool,
    replays: Mapping[tuple[int, ...], RequestCounts],
    *,
    fingerprint_flags_configured: bool | None = None,
    label=lambda w: str(list(w)),
) -> Settlement:
    """The trained wiring the evidence names (module docstring).

    top: the step-0 search's top wiring an engine can feed; contenders: the wirings step 0
      cannot tell from it (top first); configured: what the config names (None: nothing);
      step0_clearly: the top clearly beats the configured one at step 0.
    replays: per wiring, its (accepted, rounds) per request (contenders, and the configured
      wiring where replayed).
    fingerprint_flags_configured: the fc fingerprint flags a block of the configured wiring
      against the top's (None: not measured)."""
    witnesses: list[Witness] = []
    step0_pref = top if (configured is None or step0_clearly) else None
    if configured is None:
        says = f"{label(top)} ranks first; the config names no wiring of these slots"
    elif configured == top:
        says = f"the configured {label(top)} ranks first"
    elif step0_clearly:
        says = f"{label(top)} clearly beats the configured {label(configured)}"
    else:
        says = f"{label(top)} ranks first, within noise of the configured {label(configured)}"
    witnesses.append(Witness("step-0 search", says, step0_pref))

    stands = configured is not None and (configured == top or not step0_clearly)
    if fingerprint_flags_configured is not None and configured is not None and configured != top:
        if fingerprint_flags_configured:
            says = (
                f"the configured {label(configured)} feeds an fc block a slot whose projected "
                f"norm is off by over 2x from {label(top)}'s"
            )
            witnesses.append(Witness("fc fingerprint", says, top))
            stands = False
        else:
            says = (
                f"the fc blocks' projected norms do not tell {label(configured)} from {label(top)}"
            )
            witnesses.append(Witness("fc fingerprint", says, None))
    base = configured if stands else top
    assert base is not None
    # the replays: a wiring is preferred over the base only when its paired interval excludes 0
    pool = list(dict.fromkeys([*contenders, *([configured] if configured is not None else [])]))
    better: list[tuple[float, tuple[int, ...], PairedDiff]] = []
    if base in replays:
        for w in pool:
            if w == base or w not in replays:
                continue
            d = replay_diff(replays[base], replays[w])
            if d.excludes_zero and d.diff is not None and d.diff > 0:
                better.append((d.diff, w, d))
    replay_pref: tuple[int, ...] | None = None
    if better:
        diff, replay_pref, d = max(better, key=lambda b: b[0])
        witnesses.append(
            Witness(
                "replays",
                f"{label(replay_pref)} accepts more than {label(base)} on the same requests "
                f"(+{diff:.3f} accepted a round, 95% interval [{d.low:+.3f}, {d.high:+.3f}])",
                replay_pref,
            )
        )
    elif base in replays and len(pool) > 1:
        witnesses.append(
            Witness(
                "replays",
                f"no wiring tried accepts clearly more than {label(base)} on these requests "
                "(every paired interval holds 0)",
                None,
            )
        )
    if replay_pref is not None and replay_pref == configured and not stands:
        against = [w.name for w in witnesses if w.prefers == top]
        return Settlement(
            None,
            False,
            tuple(contenders),
            tuple(witnesses),
            f"the witnesses disagree: the {' and the '.join(against)} prefer {label(top)}, the "
            f"replays the configured {label(configured)}; more samples (the search's positions "
            "and the replay's requests), or --target for serving-exact samples, would settle it",
        )
    chosen = replay_pref if replay_pref is not None else base
    stands = stands and chosen == configured
    indistinct = tuple(
        w for w in pool if w != chosen and w in contenders and not clearly_below(w, chosen, replays)
    )
    return Settlement(chosen, stands, indistinct, tuple(witnesses))


def clearly_below(w: tuple[int, ...], than: tuple[int, ...], replays) -> bool:
    """`w` replays clearly below `than` on the same requests (the paired interval excludes 0)."""
    if w not in replays or than not in replays:
        return False
    d = replay_diff(replays[w], replays[than])
    return d.excludes_zero and d.diff is not None and d.diff > 0
