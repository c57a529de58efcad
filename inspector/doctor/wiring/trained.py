"""Which wiring the weights were trained on, asked of the weights themselves, never of the config.

A draft's config is where the wiring bug lives: it may name the ids the engine feeds (a config
rewritten for serving) rather than those the fc was trained on, and nothing errors. So every
verdict that names a wiring (`reconcile`, and the one-line warning of `accept`, `compare` and
`sweep`) first runs the doctor's wiring search on the samples at hand: every ordered choice of
the fc's width of slots (greedy past six slots), ranked by step-0 all-tok accuracy, the named
wirings (configured, train, serve, the engines' default) evaluated to the end. The top-ranked
wiring an engine can feed (`named_wirings.recommend`) is the trained one.

The check is step 0 only (one draft forward per scored row, the fc projections cached by the
evaluator), on the first `DEFAULT_SAMPLES` readable samples: a wrong wiring moves step-0
accuracy by tens of points, which a few hundred positions settle (`doctor.stats`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from inspector.doctor.stats import clearly_better, paired_hits_z
from inspector.doctor.wiring.named import named_wirings, recommend, wiring_results
from inspector.doctor.wiring.search import search_wirings
from inspector.errors import InputError
from inspector.evaluate import Evaluator
from inspector.metrics import Counts
from inspector.progress import StageProgress
from inspector.wiring import Wiring

DEFAULT_SAMPLES = 8
MAX_CONTENDERS = 4  # wirings replayed to settle what step 0 cannot tell apart
# Exhaustive up to this many slots (8P3 = 336 wirings, most dropped after the first sample)
EXHAUSTIVE_SLOTS = 8


@dataclass(frozen=True)
class TrainedWiring:
    """The search's answer, beside the wiring the config names.

    wiring: the trained wiring (the top-ranked one an engine can feed).
    configured: what the config's aux ids select among these slots (None: they select none).
    clearly: the trained wiring beats the configured one by a paired test and a real margin
      (`stats.clearly_better`); False when they are the same wiring or too close to tell.
    """

    wiring: tuple[int, ...]
    label: str
    all_tok: Counts
    configured: tuple[int, ...] | None
    configured_label: str | None
    configured_all_tok: Counts | None
    clearly: bool
    z: float | None
    samples: tuple[int, ...]
    searched: int  # wirings scored
    # the wirings step 0 cannot tell from the top one (not clearly worse by the paired test),
    # the top one first: a replay of several steps settles between them (adjacent layers of a
    # small target carry much the same information)
    contenders: tuple[tuple[int, ...], ...] = ()
    # every wiring the search scored on all its samples -> its step-0 all-tok counts
    scored: dict[tuple[int, ...], Counts] = field(default_factory=dict, compare=False)
    # the fc fingerprint flags a block of the configured wiring against the top one's (a slot
    # whose projected norm is off by over 2x); None: not measured (the same wiring, or none)
    fingerprint_flags: bool | None = None

    def all_tok_of(self, wiring: Sequence[int]) -> Counts | None:
        return self.scored.get(tuple(wiring))

    @property
    def config_is_trained(self) -> bool:
        return self.configured == self.wiring

    @property
    def config_wrong(self) -> bool:
        """The config names another wiring, clearly worse than the trained one (or none)."""
        return self.configured is None or (not self.config_is_trained and self.clearly)

    def warning(self) -> str | None:
        """One line when the configured wiring is clearly not the one the weights fit best
        (a config naming no ids is the doctor's to discuss: engines then feed a default)."""
        if self.configured is None or self.config_is_trained or not self.clearly:
            return None
        acc = f"{pct_of(self.all_tok)} step-0 all-tok on {len(self.samples)} samples"
        return (
            f"the draft's config names {self.configured_label} "
            f"({pct_of(self.configured_all_tok)}), but the weights fit {self.label} best ({acc}): "
            "an engine reading this config feeds the wrong layers (`eagle-inspect doctor` "
            "gives the serving ids)"
        )

    def to_dict(self) -> dict:
        return {
            "wiring": list(self.wiring),
            "label": self.label,
            "all_tok": self.all_tok.to_dict(),
            "configured": list(self.configured) if self.configured is not None else None,
            "configured_label": self.configured_label,
            "configured_all_tok": (
                self.configured_all_tok.to_dict() if self.configured_all_tok else None
            ),
            "clearly_better_than_configured": self.clearly,
            "z": self.z,
            "samples": list(self.samples),
            "wirings_scored": self.searched,
            "contenders": [list(w) for w in self.contenders],
            "fingerprint_flags_configured": self.fingerprint_flags,
        }


def pct_of(c: Counts | None) -> str:
    return "-" if c is None or c.acc is None else f"{100 * c.acc:.1f}%"


def readable_samples(ev: Evaluator, limit: int = DEFAULT_SAMPLES) -> tuple[int, ...]:
    """The first `limit` samples the evaluator can read (an unreadable one is the doctor's to
    name, not a reason to give no answer)."""
    out: list[int] = []
    for i in range(len(ev.samples)):
        if len(out) >= limit:
            break
        try:
            ev.samples[i]
        except InputError:
            continue
        out.append(i)
    return tuple(out)


def find_trained_wiring(
    ev: Evaluator,
    *,
    samples: Sequence[int] | None = None,
    configured: Sequence[int] | None = None,
    extra: Sequence[Sequence[int]] = (),
    progress: StageProgress | None = None,
    fingerprint: bool = False,
) -> TrainedWiring:
    """The doctor's wiring search on `samples` (default: the first `DEFAULT_SAMPLES` readable).

    configured: the configured wiring as the caller resolved it (None: as `named_wirings` reads
      the draft's config over these slots).
    extra: more wirings to score to the end (the caller quotes them).
    fingerprint: measure the fc fingerprint of the configured wiring against the top one (a
      witness `settle` weighs; the one-line warnings need none)."""
    infos = list(ev.slot_info)
    if len(infos) < ev.n_blocks:
        raise InputError(None, "samples", f"{len(infos)} slots, but fc takes {ev.n_blocks}")
    chosen = tuple(samples) if samples is not None else readable_samples(ev)
    if not chosen:
        raise InputError(None, "samples", "no readable sample to search the wiring on")
    names = named_wirings(ev, infos)
    conf = tuple(configured) if configured is not None else names.configured
    protected = list(dict.fromkeys([*names.protected, *(tuple(w) for w in extra)]))
    if conf is not None and conf not in protected:
        protected.insert(0, conf)
    ws = search_wirings(ev, chosen, protected=protected, start=conf, progress=progress, prune=True)
    results = wiring_results(ws, infos, names.named)
    best = recommend(ws, results, infos, conf)
    by = {r.wiring: r for r in results}
    conf_result = by.get(conf) if conf is not None else None
    clearly = bool(
        conf is not None and conf != best and clearly_better(ws.hits(best), ws.hits(conf))
    )
    z = (
        float(paired_hits_z(ws.hits(best), ws.hits(conf)))
        if conf is not None and conf != best and ws.hits(conf).size == ws.hits(best).size
        else None
    )
    return TrainedWiring(
        best,
        Wiring(best).label(infos),
        by[best].all_tok,
        conf,
        Wiring(conf).label(infos) if conf is not None else None,
        conf_result.all_tok if conf_result is not None else None,
        clearly,
        z,
        chosen,
        len(results),
        contenders=tuple(_contenders(ws, results, best)),
        scored={r.wiring: r.all_tok for r in results if r.complete},
        fingerprint_flags=(
            _fingerprint_flags(ev, chosen, best, conf, infos) if fingerprint else None
        ),
    )


def _fingerprint_flags(ev, samples, best, conf, infos) -> bool | None:
    """Whether the fc fingerprint flags the configured wiring against the top one (None: the
    same wiring, none configured, or no sample readable)."""
    from inspector.doctor.wiring.fingerprint import FingerprintFacts, fc_fingerprint

    if conf is None or conf == best:
        return None
    found = fc_fingerprint(ev, samples, best, {"configured": conf}, infos)
    facts = found.facts
    if not isinstance(facts, FingerprintFacts):
        return None
    return "configured" in facts.flagged_wirings


def _contenders(ws, results, best: tuple[int, ...]) -> list[tuple[int, ...]]:
    top = ws.hits(best)
    out = [best]
    for r in results:
        if len(out) >= MAX_CONTENDERS:
            break
        if r.complete and r.wiring != best and not clearly_better(top, ws.hits(r.wiring)):
            out.append(r.wiring)
    return out


# Up to this many target layers every layer is captured for the search (the embedding and every
# decoder layer's output: L + 1 slots); past it, the candidates below.
SEARCH_ALL_LAYERS = 12


def search_layers(num_layers: int, aux_ids: Sequence[int] | None) -> list[int]:
    """The HF indices a capture needs for the wiring search, whatever the config names.

    A small target: all of them (0..L). A large one: the embedding and the last layer, every id
    the config names read verbatim and shifted by one either way (the conventions differ by
    one: SGLang's +1, the input of layer i against the output of layer i), and the engines'
    default triples (vLLM / llama.cpp `[2, L//2, L-3]`, SpecForge's `[1, L//2-1, L-4]`), which
    a reader falls back to when it finds no ids where it looks."""
    L = num_layers
    if L <= SEARCH_ALL_LAYERS:
        return list(range(L + 1))
    out = {0, L}
    for k in aux_ids or ():
        out.update((k - 1, k, k + 1))
    out.update((2, L // 2, L - 3, 1, L // 2 - 1, L - 4))
    return sorted(k for k in out if 0 <= k <= L)
