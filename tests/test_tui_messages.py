"""The device thread's reports: one message per event, and which queued ones a newer one replaces."""

from __future__ import annotations

from types import SimpleNamespace

from inspector.serving.spec import DraftSpec
from inspector.tui import messages as msg
from inspector.tui.events import Reports
from inspector.tui.tau_settings import Serving

TRAIN, SERVE = (0, 1, 2), (1, 2, 3)


def view(gen: int, index: int, wirings, prefetch: bool = False) -> msg.ViewReady:
    return msg.ViewReady(gen, SimpleNamespace(index=index), dict.fromkeys(wirings), prefetch)


def test_every_report_posts_its_own_message():
    posted: list = []
    reports: Reports = msg.PostReports(SimpleNamespace(post_message=posted.append))
    trees = SimpleNamespace(index=0, wiring=TRAIN, spec=DraftSpec(3))
    reports.load_progress("importing torch")
    reports.loaded("session")
    reports.load_failed("bad")
    reports.view_ready(1, SimpleNamespace(index=0), {}, False)
    reports.view_failed(1, 0, "bad", "sample")
    reports.scored([], [(2, "bad")], [])
    reports.accepts_ready(0, Serving(DraftSpec(3)), [])
    reports.serving_failed(Serving(DraftSpec(3)), "no target")
    reports.trees_ready(trees)
    reports.trees_failed("oom")
    reports.compared(trees)
    reports.compare_failed("no B")
    reports.task_done("export", result="x.json")
    reports.job_crashed("Traceback")
    names = [type(m).__name__ for m in posted]
    assert names == [
        "LoadProgress", "Loaded", "LoadFailed", "ViewReady", "ViewFailed", "ScoredBatch",
        "AcceptsReady", "ServingFailed", "TreesReady", "TreesFailed", "Compared",
        "CompareFailed", "TaskDone", "JobCrashed",
    ]  # fmt: skip
    assert len({m.handler_name for m in posted}) == len(posted)  # one handler each
    assert posted[5].errors == [(2, "bad")] and posted[12].result == "x.json"
    assert posted[7].error == "no target" and posted[11].error == "no B"


def test_a_closing_app_does_not_break_the_device_thread():
    def closed(message):
        raise RuntimeError("app closed")

    msg.PostReports(SimpleNamespace(post_message=closed)).load_failed("x")  # no raise


def test_only_a_message_carrying_everything_an_older_one_does_replaces_it():
    assert msg.LoadProgress("a").can_replace(msg.LoadProgress("b"))
    assert not msg.LoadProgress("a").can_replace(msg.LoadFailed("b"))
    # the same sample, every wiring again: the later result supersedes
    assert view(3, 0, [TRAIN]).can_replace(view(4, 0, [TRAIN, SERVE]))
    assert view(3, 0, [TRAIN]).can_replace(view(-1, 0, [TRAIN], prefetch=True))
    assert not view(3, 0, [TRAIN, SERVE]).can_replace(view(4, 0, [TRAIN]))  # a wiring short
    assert not view(3, 0, [TRAIN]).can_replace(view(4, 1, [TRAIN]))  # another sample
    spec = DraftSpec(3)
    sv = Serving(spec)
    a = [SimpleNamespace(wiring=TRAIN)]
    ab = [SimpleNamespace(wiring=TRAIN), SimpleNamespace(wiring=SERVE)]
    assert msg.AcceptsReady(0, sv, a).can_replace(msg.AcceptsReady(0, sv, ab))
    assert not msg.AcceptsReady(0, sv, ab).can_replace(msg.AcceptsReady(0, sv, a))
    other = Serving(DraftSpec(2))
    assert not msg.AcceptsReady(0, sv, a).can_replace(msg.AcceptsReady(0, other, a))
    t0 = SimpleNamespace(index=0, wiring=TRAIN, spec=spec)
    t1 = SimpleNamespace(index=1, wiring=TRAIN, spec=spec)
    assert msg.TreesReady(t0).can_replace(msg.TreesReady(t0))
    assert not msg.TreesReady(t0).can_replace(msg.TreesReady(t1))
    assert not msg.ScoredBatch([], [], []).can_replace(msg.ScoredBatch([], [], []))  # they add up
