"""The wiring finding's accept lengths (`doctor/checks/accept_lengths.py`) on a tiny synthetic draft: which
samples are replayed (the token budget, the compute plan), which wirings are quoted, what is not
quoted, and that each figure is the replay's own pooled count."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

import inspector.doctor.checks.accept_lengths as al
from inspector.doctor.budget import ACCEPT_STEPS
from inspector.doctor.diagnose import build_context
from inspector.errors import InputError
from inspector.evaluate import Evaluator
from inspector.formats import SampleSet, load_draft
from inspector.metrics.rounds import AcceptStats
from inspector.serving.replay import Replayer
from inspector.serving.spec import DraftSpec
from inspector.synthetic import SyntheticSpec, write_synthetic
from inspector.wiring import Wiring

TRAIN, SERVE = (0, 1, 2), (1, 2, 3)
RUN = SimpleNamespace(shift=0, corrected=False)  # a search read as trained, no correction


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    """Three 40-token samples; named wirings: configured = train = (0, 1, 2), serve (1, 2, 3)."""
    draft, samples = write_synthetic(
        Path(tmp_path_factory.mktemp("syn")),
        SyntheticSpec(size="tiny", n_samples=3, seq_len=40),
    )
    return build_context(Evaluator(load_draft(draft), SampleSet(samples)), range(3))


def pooled(ctx, w, samples) -> AcceptStats:
    """The replay's pooled count over `samples`, as an engine logs it."""
    rep = Replayer(ctx.ev, DraftSpec(ACCEPT_STEPS))
    total = AcceptStats(ACCEPT_STEPS)
    for i in samples:
        total.add(rep.replay(i, Wiring(w)).stats)
    return total


def test_not_quoted_when_the_engine_would_run_neither(ctx):
    """Read one position off, or only fitting after a config correction: nothing quoted."""
    for run in (
        SimpleNamespace(shift=1, corrected=False),
        SimpleNamespace(shift=0, corrected=True),
    ):
        out = al.accept_lengths(ctx, run, TRAIN)
        assert out.by_wiring == {} and out.samples == () and out.rec_stats is None


@pytest.mark.parametrize(
    ("tokens", "used"), [(39, (0,)), (40, (0,)), (41, (0, 1)), (80, (0, 1)), (81, (0, 1, 2))]
)
def test_the_first_samples_up_to_the_token_budget(ctx, monkeypatch, tokens, used):
    """A sample is replayed while the budget has tokens left (the first one always)."""
    monkeypatch.setattr(al, "ACCEPT_TOKENS", tokens)
    out = al.accept_lengths(ctx, RUN, TRAIN)
    assert out.samples == used


def test_samples_over_the_compute_plan_are_skipped_not_the_end(ctx):
    """The plan's accept samples: the others are passed over, the rest still replayed."""
    planned = replace(ctx, plan=replace(ctx.plan, accept_samples=[1, 2]))
    out = al.accept_lengths(planned, RUN, TRAIN)
    assert out.samples == (1, 2)
    assert out.by_wiring[TRAIN] == round(pooled(ctx, TRAIN, (1, 2)).accept_length, 4)
    assert al.accept_lengths(
        replace(ctx, plan=replace(ctx.plan, accept_samples=[])), RUN, TRAIN
    ) == (al.AcceptLengths())


def test_the_recommended_wiring_and_the_ones_engines_feed_each_get_the_replays_count(ctx):
    """rec first, then serve, the engine default and the configured wiring where they differ;
    each figure is the replay's pooled count, rec's stats are rec's own."""
    out = al.accept_lengths(ctx, RUN, SERVE)
    assert set(out.by_wiring) == {SERVE, TRAIN}  # configured (= train) is quoted beside rec
    for w in (SERVE, TRAIN):
        assert out.by_wiring[w] == round(pooled(ctx, w, out.samples).accept_length, 4)
    rec = pooled(ctx, SERVE, out.samples)
    assert (out.rec_stats.rounds, out.rec_stats.accepted) == (rec.rounds, rec.accepted)
    assert out.settings == "greedy"
    assert out.bounded == frozenset(
        w for w in (SERVE, TRAIN) if pooled(ctx, w, out.samples).is_bound
    )
    named_only_configured = replace(
        ctx, names=replace(ctx.names, named={"configured": (2, 1, 0), "train": TRAIN})
    )
    out = al.accept_lengths(named_only_configured, RUN, TRAIN)
    assert set(out.by_wiring) == {TRAIN, (2, 1, 0)}


def test_a_sample_that_fails_to_replay_is_left_out_of_every_figure(ctx, monkeypatch):
    real = Replayer.replay

    def failing(self, i, w, **kw):
        if i == 1:
            raise InputError("data_1.pt", "hidden_states", "unreadable")
        return real(self, i, w, **kw)

    monkeypatch.setattr(Replayer, "replay", failing)
    out = al.accept_lengths(ctx, RUN, TRAIN)
    assert out.samples == (0, 1, 2)  # chosen by the budget; the failure is the search's finding
    monkeypatch.setattr(Replayer, "replay", real)
    assert out.by_wiring[TRAIN] == round(pooled(ctx, TRAIN, (0, 2)).accept_length, 4)
    assert out.rec_stats.rounds == pooled(ctx, TRAIN, (0, 2)).rounds


@pytest.fixture(scope="module")
def demo_ctx():
    """The demo draft on its first four training samples: train and serve accept differently,
    and the samples end inside a round (the counts there are lower bounds)."""
    from inspector.demo_paths import demo_paths

    try:
        demo = demo_paths()
    except InputError:
        pytest.skip("bundled demo not built")
    ev = Evaluator(load_draft(demo.draft), SampleSet(demo.train_samples))
    return build_context(ev, range(4))


def test_rec_stats_and_bounds_are_each_wirings_own(demo_ctx):
    for rec, other in ((TRAIN, SERVE), (SERVE, TRAIN)):
        out = al.accept_lengths(demo_ctx, RUN, rec)
        mine, theirs = pooled(demo_ctx, rec, out.samples), pooled(demo_ctx, other, out.samples)
        assert (mine.rounds, mine.accepted) != (theirs.rounds, theirs.accepted)
        assert (out.rec_stats.rounds, out.rec_stats.accepted) == (mine.rounds, mine.accepted)
        assert out.by_wiring[rec] == round(mine.accept_length, 4)
        assert out.bounded == frozenset(
            w for w, st in ((rec, mine), (other, theirs)) if st.is_bound
        )
        assert TRAIN in out.bounded  # a train-wired round runs past the end of some sample
