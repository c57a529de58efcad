"""Every console example in the README and the docs runs against the bundled demo and prints
what the doc shows (`doc_examples`: the format, the markers, how figures are compared). A
figure changed in the code and not in the doc, or in the doc by hand, fails here."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from doc_examples import ROOT, blocks, compare, environment, line_matches, run, scratch_folder

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
WITH_EXAMPLES = [p for p in PAGES if blocks(p)]


def test_the_checker_fails_on_a_figure_changed_by_hand():
    printed = (
        "┏━━━━━━━━┳━━━━━━━━━━━━━━━━━┓\n"
        "┃ wiring ┃         all-tok ┃\n"
        "┡━━━━━━━━╇━━━━━━━━━━━━━━━━━┩\n"
        "│ train  │ 3944/5421 72.8% │\n"
        "│ serve  │ 1264/5421 23.3% │\n"
        "└────────┴─────────────────┘\n"
        "captured 8 samples in 5.2s -> /tmp/x/cap\n"
    )
    doc = printed.splitlines()
    assert compare(doc, printed) is None
    # the layout may differ (column widths), the words and figures may not
    assert compare(["│ train  │ 3944/5421 72.8% │"], "│ train │ 3944/5421 72.8% │") is None
    hand = [x.replace("72.8%", "74.7%") for x in doc]
    assert "74.7%" in (compare(hand, printed) or "")
    assert compare([x.replace("3944", "3945") for x in doc], printed) is not None
    assert compare([x.replace("train", "trained") for x in doc], printed) is not None
    # one unit of the last printed digit is the arithmetic's, not a change
    assert line_matches("accept len 2.06", "accept len 2.07")
    assert not line_matches("accept len 2.06", "accept len 2.08")
    assert not line_matches("1,260 tokens", "1,262 tokens")
    # timings and paths are not figures; `...` skips lines; a missing line fails
    assert compare(["captured 8 samples in 9.9s -> <path>"], printed.splitlines()[-1]) is None
    assert compare(["...", "│ serve │ 1264/5421 23.3% │"], printed) is None
    assert compare(["│ serve │ 1264/5421 23.3% │"], printed) is not None  # not at the start
    assert compare(["...", "│ train │ 3944/5421 72.8% │", "more"], printed) is not None
    # a line wrapped at another width is the same words
    assert compare(["cpu", "float32"], "cpu float32") is None


def test_an_exit_status_line_is_what_the_command_must_exit_with():
    from doc_examples import Example

    ex = Example("eagle-inspect doctor", ["╭─ ERROR engine_feeds", "...", "[exit 1]", ""], 1)
    assert ex.exit_status == 1 and ex.output == ["╭─ ERROR engine_feeds", "..."]
    assert Example("x", ["a"], 1).exit_status == 0


def test_every_page_with_examples_is_collected():
    names = {p.relative_to(ROOT).as_posix() for p in WITH_EXAMPLES}
    assert "README.md" in names and "docs/quickstart.md" in names
    for p in PAGES:
        for b in blocks(p):
            assert b.examples, f"{p}:{b.line}: a console block without a `$ ` command"


# .ci/run sets this when its docs stage (.ci/docs) will run every page's examples after the suite,
# with the same runner, in a fresh venv of the README's install alone: the stronger check, so the
# suite does not run the same examples (about 3 minutes on 2 cores) a second time there.
DOCS_STAGE_RUNS_THEM = os.environ.get("EAGLE_CI_DOCS_STAGE") == "1"


@pytest.mark.skipif(
    DOCS_STAGE_RUNS_THEM,
    reason="CI's docs stage runs every page's examples after the suite (EAGLE_CI_DOCS_STAGE=1)",
)
@pytest.mark.parametrize("page", WITH_EXAMPLES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_the_examples_print_what_the_page_shows(page: Path, tmp_path: Path):
    cwd = scratch_folder(tmp_path)
    env = environment()
    ran = 0
    skipped = []
    for b in blocks(page):
        if b.skip:
            skipped.append(f"line {b.line}: {b.skip}")
            continue
        if b.env and not os.environ.get(b.env):
            skipped.append(f"line {b.line}: needs {b.env} (its CI stage sets it)")
            continue
        for ex in b.examples:
            rc, out = run(ex, cwd, env)
            where = f"{page.relative_to(ROOT)}:{ex.line}: $ {ex.command}"
            assert rc == ex.exit_status, f"{where}\nexited {rc}:\n{out[-3000:]}"
            why = compare(ex.output, out, str(cwd))
            assert why is None, f"{where}\n{why}\n--- printed:\n{out[-4000:]}"
            ran += 1
    if not ran:
        pytest.skip("; ".join(skipped))
