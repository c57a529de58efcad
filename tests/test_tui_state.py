"""The app's state, bars and loader without Textual: set totals, errors, pins, the cursor, the
accuracy views (ours and the trainers'), and the first-loadable-sample rule."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from support import python_output

from inspector.errors import InputError
from inspector.metrics import Counts, StepMetrics
from inspector.tui.loader import first_loadable
from inspector.tui.state import ViewModel, metrics_order, next_metrics
from inspector.tui.summary import Summary
from inspector.tui.view import ViewState

ROOT = Path(__file__).resolve().parent.parent
TRAIN, SERVE, OTHER = (0, 1, 2), (1, 2, 3), (0, 2, 3)


def session(n: int = 4, *, layout: str = "speculators", ttt: int = 1, verifier: bool = True):
    from inspector.sample import SlotInfo

    return Summary(
        checkpoint="/x/draft",
        name="draft",
        layout=layout,
        device="cpu",
        dtype="float32",
        files=[f"/x/s/data_{i}.pt" for i in range(n)],
        sample_format="speculators-v1",
        slot_info=[SlotInfo("embed", 0), SlotInfo("L2", 2), SlotInfo("L4", 4), SlotInfo("L6", 6)],
        n_blocks=3,
        ttt_steps=ttt,
        fc_norms=[1.0, 2.0, 3.0],
        presets={"train": TRAIN, "serve": SERVE},
        preset_errors={},
        initial=TRAIN,
        initial_error=None,
        decoder=SimpleNamespace(has_text=False, visible=str),
        tokenizer=None,
        input_paths=[],
        has_verifier=verifier,
    )


def steps(hits: int, total: int, *, spec=None, sf=None, k: int = 0) -> list[StepMetrics]:
    return [
        StepMetrics(
            k,
            all_tok=Counts(hits, total),
            in_vocab=Counts(hits, total - 1),
            coverage=Counts(total - 1, total),
            cond=Counts(hits, total),
            spec_full=Counts(*spec) if spec else None,
            spec_cond=Counts(spec[0], spec[1] + 1) if spec else None,
            specforge=Counts(*sf) if sf else None,
        )
    ]


def loaded(**kw) -> ViewModel:
    st = ViewModel()
    st.load(session(**kw))
    return st


# --- set totals and errors ---------------------------------------------------------------------
def test_totals_sum_every_count_once():
    st = loaded()
    assert st.add_stats(0, TRAIN, steps(3, 10, spec=(4, 11), sf=(2, 9)), 12)
    assert st.add_stats(1, TRAIN, steps(5, 10, spec=(6, 11), sf=(5, 9)), 12)
    assert not st.add_stats(1, TRAIN, steps(5, 10), 12)  # counted once
    tot = st.totals[TRAIN]
    s0 = tot.steps[0]
    assert tot.n_samples == 2 and (s0.all_tok.hits, s0.all_tok.total) == (8, 20)
    assert (s0.spec_full.hits, s0.spec_full.total) == (10, 22)  # the trainers' counts sum too
    assert (s0.spec_cond.hits, s0.spec_cond.total) == (10, 24)
    assert (s0.specforge.hits, s0.specforge.total) == (7, 18)
    assert st.lengths == {0: 12, 1: 12}


def test_a_sample_failing_after_it_was_counted_leaves_the_totals():
    st = loaded()
    st.add_stats(0, TRAIN, steps(3, 10), 12)
    st.add_stats(1, TRAIN, steps(5, 10), 12)
    st.add_stats(1, SERVE, steps(1, 10), 12)
    assert st.mark_error(1, "data_1.pt: input_ids: bad")
    assert not st.mark_error(1, "again")
    assert st.totals[TRAIN].n_samples == 1 and st.totals[TRAIN].steps[0].all_tok.hits == 3
    assert st.totals[SERVE].n_samples == 0 and st.totals[SERVE].steps == []
    assert not st.add_stats(1, TRAIN, steps(5, 10), 12)  # a failed sample is never counted
    assert st.n_good == 3
    assert st.clear_error(1) and not st.clear_error(1)


def accept(i: int, w, rounds: list[tuple[int, int, int]], spec=None):
    """A SampleAccept of sample i from its rounds (start, accepted, emitted)."""
    from inspector.metrics.rounds import AcceptStats, Round
    from inspector.serving.spec import DraftSpec
    from inspector.tui.events import SampleAccept
    from inspector.tui.tau_settings import Serving

    spec = spec or DraftSpec(3)
    arr = np.array(rounds, dtype=np.int64).reshape(-1, 3)
    stats = AcceptStats.of([Round(*r) for r in rounds], spec.steps)
    a = np.zeros(12, dtype=np.int64)
    a[arr[:, 0]] = arr[:, 1]
    serving = Serving(spec)
    return SampleAccept(i, w, serving, a, arr[:, 0], arr[:, 1], arr[:, 2], stats, np.roll(a, 1))


def test_accept_totals_pool_rounds_per_wiring_and_settings():
    from inspector.serving.spec import DraftSpec

    st = loaded()
    assert st.spec == DraftSpec(3)  # one TTT step: a chain of 3
    assert st.add_accept(accept(0, TRAIN, [(2, 3, 4), (6, 0, 1)]))
    assert st.add_accept(accept(1, TRAIN, [(2, 1, 2)]))
    assert not st.add_accept(accept(1, TRAIN, [(2, 1, 2)]))  # counted once
    assert st.add_accept(accept(1, TRAIN, [(2, 1, 2)], spec=DraftSpec(2)))  # other settings
    tot = st.set_accept(TRAIN)
    assert tot.n_samples == 2 and (tot.figure.stats.rounds, tot.figure.stats.emitted) == (3, 7)
    assert tot.figure.stats.accept_length == pytest.approx(7 / 3)  # pooled: not a mean of means
    assert st.sample_accept(TRAIN).accept_length == 2.5
    assert st.missing_accepts() == [] and st.set_accept(SERVE) is None
    st.pins.append(SERVE)
    assert st.missing_accepts() == [SERVE]
    st.mark_error(0, "data_0.pt: bad")  # a failed sample leaves the totals
    tot = st.set_accept(TRAIN)
    assert tot.n_samples == 1 and tot.figure.stats.accept_length == 2.0
    assert st.missing_accepts() == [] and not st.add_accept(accept(0, TRAIN, [(2, 3, 4)]))
    assert st.clear_error(0)  # a retry worked: its replays are asked for again, then counted
    st.sample = 0
    assert st.missing_accepts() == [TRAIN, SERVE]
    assert st.add_accept(accept(0, TRAIN, [(2, 3, 4), (6, 0, 1)]))
    assert st.set_accept(TRAIN).n_samples == 2


def test_the_bar_shows_tau_for_the_sample_and_the_set():
    from inspector.tui.accuracy import accuracy_text, accuracy_title

    st = loaded(ttt=2)
    st.add_stats(0, TRAIN, steps(3, 10), 12)
    st.add_accept(accept(0, TRAIN, [(2, 2, 3), (6, 0, 1)], spec=st.spec))
    st.add_accept(accept(1, TRAIN, [(2, 2, 3)], spec=st.spec))
    lines = bar(st, "ours").splitlines()
    assert lines[0].split()[-4:] == ["in-vocab", "τ", "all-tok", "s0..s1"]
    cells = lines[1].split()
    assert cells[cells.index("33.3%") + 1] == "2.00"  # this sample: 4 tokens in 2 rounds
    assert cells[-2] == "2.33"  # the set: 7 in 3
    assert "τ" not in bar(st, "speculators")
    narrow = accuracy_text(st, metrics="ours", narrow=True, width=80).plain
    head = narrow.splitlines()[0].split()
    assert head.count("in-vocab") == 1 and head.index("in-vocab") > head.index("all-tok", 4)
    assert "2.33" in narrow and "2.00" in narrow
    assert accuracy_title("ours", st.serving).startswith(
        "accuracy · τ: accept len of a chain of 2 steps"
    )
    from inspector.serving.spec import DraftSpec
    from inspector.tui.tau_settings import Serving

    title = accuracy_title("ours", Serving(DraftSpec(5, 4, 8)))
    assert "τ: accept len of a tree of 5 steps, topk 4, 8 tokens" in title


def test_the_rounds_line_is_what_the_walk_accepts():
    from inspector.metrics.rounds import generation_runs, walk
    from inspector.tui.summary import accept_at
    from inspector.tui.view import IN_ROUND, ROUND_START, round_marks

    rng = np.random.default_rng(0)
    mask = np.zeros(40, dtype=bool)
    mask[5:18] = mask[25:40] = True
    a = rng.integers(0, 4, size=40)
    rounds = walk(a, generation_runs(mask))
    at = accept_at(a, mask)
    assert all(at[r.start + 1] == r.accepted for r in rounds)
    assert (at[:6] == -1).all() and (at[18:26] == -1).all()  # a run's first token: the prefill's
    arr = np.array([[r.start, r.accepted, r.emitted] for r in rounds])
    acc = SimpleNamespace(a_at=at, starts=arr[:, 0], emitted=arr[:, 2])
    values, marks = round_marks(acc, 40)
    assert values == at.tolist()
    assert [t for t, m in enumerate(marks) if m == ROUND_START] == [r.start + 1 for r in rounds]
    assert sum(m in (ROUND_START, IN_ROUND) for m in marks) == sum(r.emitted for r in rounds)
    assert round_marks(acc, 41) is None and round_marks(None, 40) is None


def test_tree_panel_shows_the_path_and_where_it_falls_off():
    """Row 0 drafts a tree of 2 steps, topk 2, 5 tokens: the sample's x2 = 10 is drafted, its
    x3 = 30 is not (21, 22 are): accepts 1, falls off at depth 2."""
    from inspector.serving.spec import DraftSpec
    from inspector.tui.events import SampleTrees
    from inspector.tui.panels import tree_renderable

    spec = DraftSpec(2, 2, 5)
    st = loaded()
    v = view_with(2, masked=[0, 1], misses=[], flips=[])
    v.data.input_ids = np.array([1, 2, 10, 30])
    trees = SampleTrees(
        0,
        TRAIN,
        spec,
        tokens=np.array([[10, 11, 21, 22], [12, 13, 23, 24]]),
        parent=np.array([[-1, -1, 0, 0], [-1, -1, 0, 1]]),
        depth=np.array([[1, 1, 2, 2], [1, 1, 2, 2]]),
        prob=np.array([[0.6, 0.3, 0.4, 0.1], [0.5, 0.4, 0.3, 0.2]], dtype=np.float32),
        on_path=np.array([[True, False, False, False], [False] * 4]),
        accepted=np.array([1, 0]),
    )
    lines = tree_renderable(st.session, v, trees, 0, width=36, height=15).plain.splitlines()
    assert lines[0] == "pos 0  token 2  accepts 1 of 2"
    # depth-first, each parent before its children, indented by depth
    assert [ln.split()[:2] for ln in lines[1:5]] == [
        ["✓", "10"],
        ["·", "21"],
        ["·", "22"],
        ["·", "11"],
    ]
    assert lines[2].startswith("  · 21") and lines[1].endswith("0.600")
    assert lines[5] == "  ✗ 30 (true) is not drafted here"
    row1 = tree_renderable(st.session, v, trees, 1, width=36, height=15).plain
    assert "accepts 0 of 2" in row1 and row1.endswith("\n✗ 30 (true) is not drafted here")
    import dataclasses

    ends = dataclasses.replace(
        trees,
        tokens=np.array([[10, 11, 21, 22], [30, 13, 23, 24]]),
        on_path=np.array([[True, False, False, False], [True, False, False, False]]),
        accepted=np.array([1, 1]),
    )
    row1 = tree_renderable(st.session, v, ends, 1, width=36, height=15).plain
    assert "accepts 1 of 2" in row1 and row1.endswith("the sample ends here")  # x3 is the last
    small = tree_renderable(st.session, v, trees, 0, width=36, height=5).plain
    assert "✓ 10" in small and "more nodes" in small  # the path stays when the panel is short
    assert "computing" in tree_renderable(st.session, v, None, 0).plain


def test_steps_keys_keep_the_settings_valid():
    from inspector.serving.spec import DraftSpec
    from inspector.tui.tau_settings import Serving

    st = loaded(ttt=2)
    assert st.spec == DraftSpec(2) and st.stepped_serving(1) == Serving(DraftSpec(3))
    assert st.set_serving(Serving(DraftSpec(1))) and not st.set_serving(Serving(DraftSpec(1)))
    assert st.stepped_serving(-1) is None  # a round drafts at least one step
    st.set_serving(Serving(DraftSpec(3, 4, 20)))
    assert st.stepped_serving(1).spec == DraftSpec(4, 4, 20)
    assert st.stepped_serving(-1).spec == DraftSpec(2, 4, 20)  # 4 + 16 candidates: 21 at most
    assert st.stepped_serving(-2).spec == DraftSpec(1, 4, 5)  # one level: 4 nodes, the root


def test_load_marks_the_samples_skipped_before_the_first_usable_one():
    st = ViewModel()
    s = session()
    s.first_sample, s.skipped = 2, [(0, "data_0.pt: bad"), (1, "data_1.pt: bad")]
    assert st.load(s) == [(0, "data_0.pt: bad"), (1, "data_1.pt: bad")]
    assert st.sample == 2 and st.wiring == TRAIN and set(st.errors) == {0, 1}
    assert st.preds.max_bytes > 0 and st.samples.max_bytes > 0


def test_list_rows_and_sample_metrics_follow_the_reference():
    st = loaded()
    st.add_stats(0, TRAIN, steps(3, 10), 12)
    st.add_stats(0, SERVE, steps(1, 10), 12)
    # 12 tokens are 10 positions (row j predicts x[j+2]): the count the header gives too
    assert st.list_row(0) == (10, 0.3, None, False)
    st.wiring = SERVE
    assert st.toggle_pin() is True and st.ref == SERVE
    st.wiring = TRAIN
    assert st.list_row(0) == (10, 0.3, 0.1, True)
    assert list(st.sample_metrics()) == [TRAIN, SERVE]
    assert st.scored() == 1


def test_pins_keep_the_last_three_and_unpin():
    st = loaded()
    for w in (TRAIN, SERVE, OTHER, (3, 2, 1)):
        st.wiring = w
        assert st.toggle_pin() is True
    assert st.pins == [SERVE, OTHER, (3, 2, 1)] and st.ref == (3, 2, 1)
    assert st.toggle_pin() is False and st.pins == [SERVE, OTHER]
    assert st.view_wirings() == [(3, 2, 1), SERVE, OTHER]


def test_export_wirings_shown_first_then_the_others():
    st = loaded()
    st.add_stats(0, OTHER, steps(1, 10), 12)
    st.add_stats(0, SERVE, steps(1, 10), 12)
    st.add_stats(0, TRAIN, steps(1, 10), 12)
    assert st.export_wirings(0) == [TRAIN, OTHER, SERVE]
    assert st.export_wirings(3) == [TRAIN]  # nothing computed: the shown wirings


def test_select_sample_clamps_and_parse_wiring_validates():
    st = loaded()
    assert st.select_sample(99) and st.sample == 3
    assert st.neighbours() == [2]
    assert st.parse_wiring([0, 1, 2]) == TRAIN
    with pytest.raises(InputError, match="fc takes 3"):
        st.parse_wiring([0, 1])


# --- the cursor -----------------------------------------------------------------------------------
def view_with(n_rows: int, masked: list[int], misses: list[int], flips: list[int]) -> ViewState:
    pred = SimpleNamespace(steps=[SimpleNamespace(pos=np.arange(n_rows))])
    data = SimpleNamespace(index=0, length=n_rows + 2)
    return ViewState(
        data,  # type: ignore[arg-type]
        TRAIN,
        pred,
        [],
        masked_rows=np.array(masked),
        miss_rows=np.array(misses),
        flipped_rows=np.array(flips),
    )


def test_cursor_steps_jumps_and_masked_stops():
    st = loaded()
    st.view = view_with(10, masked=[3, 4, 7], misses=[4, 7], flips=[])
    st.rows[0] = 0
    assert st.step_target(+1, mask_only=False) == 1
    assert st.step_target(+1, mask_only=True) == 3
    st.rows[0] = 4
    assert st.step_target(+1, mask_only=True) == 7
    assert st.step_target(-1, mask_only=True) == 3
    assert st.edge_target(True, mask_only=True) == 7 and st.edge_target(True, False) == 9
    assert st.jump_target(st.view.miss_rows, forward=True) == 7
    st.rows[0] = 7
    assert st.jump_target(st.view.miss_rows, forward=True) == 4  # wraps
    assert st.jump_target(st.view.flipped_rows, forward=True) is None
    assert not st.set_row(7) and st.set_row(50) and st.rows[0] == 9  # clamped
    st.rows[0] = 5
    st.snap_to_masked()
    assert st.rows[0] == 7


def test_ready_for_needs_a_session_and_a_view():
    st = ViewModel()
    assert st.ready_for("help") and not st.ready_for("preset")
    st.load(session())
    assert st.ready_for("preset") and not st.ready_for("step") and not st.ready_for("export")
    st.view = view_with(4, [1], [], [])
    assert st.ready_for("step") and st.ready_for("export")


# --- the accuracy views ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "layout,order",
    [
        ("speculators", ("ours", "speculators", "specforge")),
        ("specforge", ("ours", "specforge", "speculators")),
    ],
)
def test_v_cycles_ours_then_the_layouts_trainer(layout, order):
    assert metrics_order(layout) == order
    seen, m = [], "ours"
    for _ in range(3):
        m = next_metrics(m, layout)
        seen.append(m)
    assert tuple(seen) == (*order[1:], "ours")


def bar(st: ViewModel, metrics: str, width: int = 200) -> str:
    from inspector.tui.accuracy import accuracy_text

    text = accuracy_text(st, metrics=metrics, narrow=False, width=width)
    assert text is not None
    return text.plain


def test_trainer_views_show_the_trainers_counts():
    st = loaded()
    st.add_stats(0, TRAIN, steps(3, 10, spec=(4, 11), sf=(2, 9)), 12)
    st.add_stats(1, TRAIN, steps(5, 10, spec=(6, 11), sf=(5, 9)), 12)
    ours = bar(st, "ours")
    assert "sample all-tok" in ours and "3/10 30.0%" in ours and "8/20 40.0%" in ours
    assert "2/4 samples all-tok" in ours
    spec = bar(st, "speculators")
    assert "sample full_acc_0" in spec and "cond_acc_0" in spec
    assert "4/11 36.4%" in spec and "4/12 33.3%" in spec  # this sample: full, cond
    assert "10/22 45.5%" in spec and "10/24 41.7%" in spec  # the set
    assert "3/10" not in spec and "cumulative" in spec
    sf = bar(st, "specforge")
    assert "sample acc_0" in sf and "2/9 22.2%" in sf and "7/18 38.9%" in sf
    assert "full-vocab argmax" in sf


def test_trainer_views_without_the_verifier_say_it_needs_target():
    st = loaded(verifier=False)
    st.add_stats(0, TRAIN, steps(3, 10), 12)
    for metrics in ("speculators", "specforge"):
        text = bar(st, metrics)
        assert "needs --target" in text and "%" not in text.split("\n")[1]
    assert "needs --target" not in bar(st, "ours")


def test_trainer_views_by_step_and_simulated_acc_len():
    from inspector.tui.accuracy import by_step

    k_steps = [
        StepMetrics(0, specforge=Counts(8, 10), spec_full=Counts(6, 10), spec_cond=Counts(6, 10)),
        StepMetrics(1, specforge=Counts(5, 10), spec_full=Counts(3, 10), spec_cond=Counts(3, 6)),
    ]
    assert by_step("specforge", k_steps) == "80.0 50.0%  1.200"  # 0.8 + 0.8 * 0.5
    assert by_step("speculators", k_steps) == "60.0 30.0% / 60.0 50.0%"
    st = loaded(ttt=2)
    st.add_stats(0, TRAIN, k_steps, 12)
    assert "acc s0..s1, simulated_acc_len" in bar(st, "specforge")


# --- the first sample that loads ------------------------------------------------------------------
class FakeSet:
    """A sample set whose files in `bad` are corrupt."""

    def __init__(self, bad: set[int], n: int = 4) -> None:
        self.bad, self.n = bad, n
        self.files = [f"data_{i}.pt" for i in range(n)]

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if i in self.bad:
            raise InputError(self.files[i], "input_ids", "corrupt")
        return SimpleNamespace(slot_info=[f"slots of {i}"], format="speculators-v1")


def test_the_first_usable_sample_and_the_ones_skipped_before_it():
    first, skipped = first_loadable(FakeSet({0, 1}))
    assert first == 2 and [i for i, _ in skipped] == [0, 1]
    assert "data_0.pt: input_ids: corrupt" in skipped[0][1]
    assert first_loadable(FakeSet(set())) == (0, [])


def test_no_usable_sample_is_one_input_error():
    with pytest.raises(InputError, match="none of the 3 sample files is usable"):
        first_loadable(FakeSet({0, 1, 2}, n=3))


def test_the_engine_side_never_imports_textual():
    code = (
        "import sys, inspector.tui.device_thread, inspector.tui.state, inspector.tui.loader, "
        "inspector.tui.summary, inspector.tui.events, inspector.tui.tasks, inspector.tui.view, "
        "inspector.tui.panels, inspector.tui.accuracy, inspector.tui.trees, inspector.tui.jobs, "
        "inspector.tui.backend, inspector.tui.evaluator_backend, inspector.tui.totals, "
        "inspector.tui.first_look, inspector.tui.evidence;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'torch')))"
    )
    out = python_output(code)
    assert out.stdout.strip() == "[]", out.stderr


def test_the_rounds_line_under_sglangs_convention_and_a_continuation():
    """a_by_start over the continuation (longer than the sample) and SGLang's round after the
    stop (emitting nothing, starting at the sample's end) leave the line one entry per token."""
    from inspector.engines import Engine
    from inspector.metrics.rounds import Run, walk
    from inspector.tui.summary import accept_at
    from inspector.tui.view import ROUND_START, round_marks

    mask = np.zeros(20, dtype=bool)
    mask[5:] = True
    a = np.full(20 + 6, 2)  # every round accepts 2, the continuation too
    rounds = walk(a, [Run(5, 19, 25)], depth=3, engine=Engine.SGLANG)
    assert rounds[-1].after_stop and rounds[-1].start >= 19
    at = accept_at(a, mask)
    assert len(at) == 20
    arr = np.array([[r.start, r.emitted] for r in rounds])
    acc = SimpleNamespace(a_at=at, starts=arr[:, 0], emitted=arr[:, 1])
    values, marks = round_marks(acc, 20)
    assert [t for t, m in enumerate(marks) if m == ROUND_START] == [
        r.start + 1 for r in rounds if not r.after_stop
    ]


def test_the_second_drafts_keys_and_switching_between_drafts():
    """`open --compare`: draft B's keys carry a marker before their slots, are validated against
    B's own fc blocks, labelled with the draft's letter, and `B` returns to the wiring each draft
    was last shown with (B's first: its --compare-wiring; A's after the doctor applied one)."""
    from dataclasses import replace

    from inspector.tui.drafts import draft_letter, is_second, second_key, slots_of

    assert second_key((1, 2)) == (-1, 1, 2) and slots_of((-1, 1, 2)) == (1, 2)
    assert slots_of((1, 2)) == (1, 2) and not is_second(()) and not is_second((0, 1))
    assert (draft_letter((0,)), draft_letter((-1, 0))) == ("A", "B")
    with pytest.raises(ValueError):
        second_key((-1, 2))
    vm = ViewModel()
    s = session()
    s.compare = "/x/b"
    vm.load(s)
    assert vm.switch_draft() is None  # B is not loaded yet
    s.second = replace(
        s, checkpoint="/x/b", n_blocks=2, presets={"train": (0, 1), "serve": (2, 3)},
        initial=(2, 3), compare=None,
    )  # fmt: skip
    assert s.wiring_label(TRAIN) == "A [embed, L2, L4]"
    assert s.wiring_label(second_key((2, 3))) == "B [L4, L6]"
    assert s.preset_name(second_key((2, 3))) == "serve" and s.preset_name(second_key(TRAIN)) is None
    assert s.of_draft(second_key((2, 3))) is s.second and s.of_draft(TRAIN) is s
    assert vm.switch_draft() == second_key((2, 3)) == vm.wiring and vm.left == {"A": TRAIN}
    # a wiring set while B is shown is B's, validated against B's two fc blocks
    assert vm.parse_wiring((0, 1)) == second_key((0, 1))
    with pytest.raises(InputError):
        vm.parse_wiring(TRAIN)  # three slots for B's two blocks
    assert vm.parse_wiring(OTHER, second=False) == OTHER
    vm.wiring = second_key((0, 1))
    assert vm.switch_draft() == TRAIN and vm.left["B"] == second_key((0, 1))
    assert vm.switch_draft() == second_key((0, 1))
    vm.wiring = OTHER  # the doctor applied A's wiring while B was shown
    assert vm.switch_draft() == second_key((0, 1))  # B again, not A's older one
    assert vm.switch_draft() == OTHER  # and back to the doctor's
    vm.left.clear()
    vm.wiring = second_key((2, 3))
    assert vm.other_draft() == TRAIN  # (what the compare screen calls A while B is shown)
    assert vm.switch_draft() == TRAIN  # no A key remembered: A's initial
