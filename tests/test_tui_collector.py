"""The app's idle garbage collector: off while input arrives, CPython's rhythm otherwise, and
automatic collection handed back when it stops."""

from __future__ import annotations

import gc

import pytest

from inspector.tui import collector as col
from inspector.tui.collector import IdleCollector
from inspector.tui.input_clock import InputClock


class Clock:
    def __init__(self) -> None:
        self.t = 0.0  # differences of small multiples of QUIET_S stay exact

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def collected(monkeypatch):
    """The generations gc.collect was asked for; young objects are always pending."""
    calls: list[int] = []
    monkeypatch.setattr(col.gc, "collect", lambda generation=2: calls.append(generation) or 0)
    monkeypatch.setattr(col.gc, "get_count", lambda: (5, 0, 0))
    yield calls


@pytest.fixture
def collector(clock):
    c = IdleCollector(InputClock(clock))
    yield c
    c.stop()
    assert gc.isenabled()


def test_not_started_it_never_collects(collector, collected):
    assert collector.tick() is None
    assert collected == []


def test_start_disables_and_stop_enables_the_automatic_collector(collector):
    assert gc.isenabled() and collector.running is False
    collector.start()
    assert not gc.isenabled() and collector.running is True
    collector.start()  # twice is once
    collector.stop()
    assert gc.isenabled() and collector.running is False
    collector.stop()
    assert gc.isenabled()


def test_it_waits_for_quiet_after_input(collector, collected, clock):
    collector.start()
    collector.inputs.input_seen()
    clock.t += col.QUIET_S * 0.9
    assert collector.tick() is None
    clock.t += col.QUIET_S * 0.2
    assert collector.tick() == 0
    assert collected == [0]


def test_exactly_quiet_s_after_input_it_collects(collector, collected, clock):
    collector.start()
    collector.inputs.input_seen()
    clock.t += col.QUIET_S
    assert collector.tick() == 0


def test_held_keys_do_not_starve_it(collector, collected, clock, monkeypatch):
    collector.start()
    collector.inputs.input_seen()
    monkeypatch.setattr(col.gc, "get_count", lambda: (col.FORCE_AT - 1, 0, 0))
    assert collector.tick() is None
    monkeypatch.setattr(col.gc, "get_count", lambda: (col.FORCE_AT, 0, 0))
    assert collector.tick() == 0


def test_nothing_young_nothing_collected(collector, collected, monkeypatch):
    collector.start()
    monkeypatch.setattr(col.gc, "get_count", lambda: (0, 3, 3))
    assert collector.tick() is None
    assert collected == []


def test_generations_follow_cpythons_rhythm_when_idle(collector, collected, clock):
    collector.start()
    gens = []
    for _ in range(col.EVERY * col.EVERY):
        clock.t += col.FULL_QUIET_S
        gens.append(collector.tick())
    assert gens == collected
    assert gens.count(2) == 1 and gens[-1] == 2
    assert gens.count(1) == col.EVERY - 1
    assert [i for i, g in enumerate(gens) if g] == [
        k * col.EVERY - 1 for k in range(1, col.EVERY + 1)
    ]


def _typing(collector, clock, ticks: int, every: float) -> list[int | None]:
    """Input `every` seconds (a quiet pause each time, but a short one), a tick before each."""
    out = []
    for _ in range(ticks):
        clock.t += every
        out.append(collector.tick())
        collector.inputs.input_seen()
    return out


def test_a_due_full_collection_waits_for_a_long_pause(collector, collected, clock):
    collector.start()
    gap = (col.QUIET_S + col.FULL_QUIET_S) / 2
    gens = _typing(collector, clock, col.EVERY * col.EVERY, gap)
    assert 2 not in gens and gens[-1] == 1  # due at the hundredth, deferred to a middle one
    clock.t += col.FULL_QUIET_S * 0.99
    assert collector.tick() == 0
    collector.inputs.input_seen()
    clock.t += col.FULL_QUIET_S
    assert collector.tick() == 2  # the first long pause
    clock.t += col.FULL_QUIET_S
    assert collector.tick() == 0  # and only once


def test_a_due_full_collection_is_forced_under_endless_input(collector, collected, clock):
    collector.start()
    gap = (col.QUIET_S + col.FULL_QUIET_S) / 2
    _typing(collector, clock, col.EVERY * col.EVERY, gap)
    due = clock.t
    gens = _typing(collector, clock, int(col.FULL_FORCE_S / gap) + 2, gap)
    assert gens.count(2) == 1
    forced_at = due + gap * (gens.index(2) + 1)
    assert col.FULL_FORCE_S <= forced_at - due < col.FULL_FORCE_S + gap


def test_a_real_collection_frees_a_cycle(collector):
    """Unmocked: with the automatic collector off, a cycle lives until tick collects it."""
    import weakref

    class Node:
        pass

    collector.start()
    a = Node()
    a.self = a
    ref = weakref.ref(a)
    del a
    for _ in range(col.EVERY * col.EVERY):  # whatever generation the cycle reached
        collector.tick()
        if ref() is None:
            break
    assert ref() is None


def test_a_due_full_collection_is_forced_exactly_full_force_s_after(collector, collected, clock):
    collector.start()
    for _ in range(col.EVERY * col.EVERY - 1):
        clock.t += col.FULL_QUIET_S
        collector.tick()
    collector.inputs.input_seen()
    clock.t += col.QUIET_S
    assert collector.tick() == 1  # the hundredth: the full one falls due, the input too recent
    due = clock.t
    clock.t = due + col.FULL_FORCE_S - col.QUIET_S
    collector.inputs.input_seen()
    clock.t = due + col.FULL_FORCE_S
    assert collector.tick() == 2
