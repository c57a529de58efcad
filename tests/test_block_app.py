"""The app on a block draft (DFlash), driven by Textual's pilot: it opens on the configured
wiring, toggles to the searched one (the figures change), pages samples and blocks, and takes
layers chosen in the wiring editor. The draft is `block_fixtures.block_bed`'s copy that lost its
ids: the reference and SGLang feed their guess HF [2, 3, 4], the weights were trained on
TRAINED (HF [1, 4, 6])."""

from __future__ import annotations

import argparse
import asyncio
import io

import pytest
from block_fixtures import TRAINED
from rich.console import Console

from inspector.session import Inputs
from inspector.tui.block_app import BlockApp

TRAINED_HF = tuple(k + 1 for k in TRAINED)

pytestmark = pytest.mark.usefixtures("one_thread")


def shown(app: BlockApp, selector: str) -> str:
    """The plain text a panel shows."""
    out = io.StringIO()
    Console(width=200, file=out, color_system=None).print(app.query_one(selector).content)
    return out.getvalue()


def block_app(bed, **kw) -> BlockApp:
    inputs = Inputs(bed.lost_ids, [str(bed.samples)], bed.target, None, None, False, None)
    return BlockApp(inputs, device="cpu", **kw)


async def loaded(app: BlockApp, pilot) -> None:
    await app.workers.wait_for_complete()
    await pilot.pause()


def test_open_toggle_and_page(block_bed):
    async def run() -> None:
        app = block_app(block_bed)
        async with app.run_test(size=(160, 50)) as pilot:
            await loaded(app, pilot)
            assert app.error is None and app.wirings is not None
            names = [name for name, _, _ in app.wirings.rows]
            assert names == ["configured", "searched"]
            layers = {
                name: tuple(app.wirings.slot_info[i].hf_index for i in slots)
                for name, slots, _ in app.wirings.rows
            }
            assert layers == {"configured": (2, 3, 4), "searched": TRAINED_HF}
            head = shown(app, "#block-header")
            assert "wiring configured [L2, L3, L4]" in head and "SGLang 0.5.23" in head
            rows = shown(app, "#block-rows")
            assert "predicted" in rows and "p(true)" in rows and "rank" in rows
            figures = shown(app, "#block-accuracy")
            assert "accept length (vLLM)" in figures and "searched" in figures
            assert "…" not in figures  # every listed wiring's totals are in
            before = app.browser.sample_accuracy(0, app.shown)

            await pilot.press("w")
            await loaded(app, pilot)
            assert "wiring searched [L1, L4, L6]" in shown(app, "#block-header")
            after = app.browser.sample_accuracy(0, app.shown)
            assert after != before
            totals = [app.browser.totals(app.shown)]
            app.current = 0
            totals.append(app.browser.totals(app.shown))
            assert totals[0].accept_length() > totals[1].accept_length()
            app.current = 1

            rows_before = shown(app, "#block-rows")
            await pilot.press("right", "right")
            await loaded(app, pilot)
            assert app.block == 2 and "block 3/" in shown(app, "#block-header")
            assert shown(app, "#block-rows") != rows_before
            await pilot.press("n")
            await loaded(app, pilot)
            assert (app.sample, app.block) == (1, 0)
            assert "sample 1 (2/" in shown(app, "#block-header")
            await pilot.press("p", "p")
            await loaded(app, pilot)
            assert app.sample == len(app.browser) - 1

    asyncio.run(run())


def test_chosen_layers_join_the_rows(block_bed):
    """`c` opens the wiring editor; the layers chosen there become a row of their own, their
    totals computed beside the others."""

    async def run() -> None:
        app = block_app(block_bed)
        async with app.run_test(size=(160, 50)) as pilot:
            await loaded(app, pilot)
            await pilot.press("c")
            await pilot.pause()
            # fc block 0 <- slot 0 (the embedding), the others as shown
            await pilot.press("0", "enter")
            await loaded(app, pilot)
            assert app.wirings.rows[app.current][0] == "chosen"
            assert app.shown.slots == (0, 3, 4)
            assert app.browser.has_totals(app.shown)
            assert "chosen" in shown(app, "#block-accuracy")

    asyncio.run(run())


def test_initial_wiring_and_open_builds_it(block_bed):
    from inspector.commands.open import build_app
    from inspector.errors import InputError

    args = argparse.Namespace(
        checkpoint=str(block_bed.draft),
        samples=[str(block_bed.samples)],
        target=str(block_bed.target),
        embed=None,
        tokenizer=None,
        slot_layers=None,
        prompts=None,
        device="cpu",
        dtype="auto",
        wiring="L2,L3,L4",
        compare=None,
        engine_log=None,
        temperature=0.0,
    )
    app = build_app(args)
    assert isinstance(app, BlockApp) and app.initial_wiring == "L2,L3,L4"
    with pytest.raises(InputError, match="--compare"):
        build_app(argparse.Namespace(**{**vars(args), "compare": "other"}))

    async def run() -> None:
        async with app.run_test(size=(160, 50)) as pilot:
            await loaded(app, pilot)
            assert app.wirings.rows[app.current][0] == "chosen"
            assert "wiring chosen [L2, L3, L4]" in shown(app, "#block-header")

    asyncio.run(run())


def test_paint_never_computes(block_bed, monkeypatch):
    """A sample whose blocks are not kept is computed in a worker thread: the UI thread runs no
    forward and no slot norms, it shows 'computing…' until the worker is done."""
    import threading

    import inspector.evaluate.block_view as bv

    ui = threading.current_thread()
    threads = []
    predict, norms = bv.predict_blocks, bv.slot_norms_of

    def predict_blocks(*a, **kw):
        threads.append(threading.current_thread())
        return predict(*a, **kw)

    def slot_norms_of(*a, **kw):
        threads.append(threading.current_thread())
        return norms(*a, **kw)

    async def run() -> None:
        app = block_app(block_bed)
        async with app.run_test(size=(160, 50)) as pilot:
            await loaded(app, pilot)
            monkeypatch.setattr(bv, "predict_blocks", predict_blocks)
            monkeypatch.setattr(bv, "slot_norms_of", slot_norms_of)
            app.browser._blocks.clear()
            app.browser._last = None
            app.browser._norms.clear()
            app.paint()
            assert "computing" in shown(app, "#block-header")
            await loaded(app, pilot)
            assert "block accuracy" in shown(app, "#block-header")
            await pilot.press("n", "w", "right")
            await loaded(app, pilot)
            assert "block accuracy" in shown(app, "#block-header")
            assert threads and ui not in threads

    asyncio.run(run())


def test_browsed_blocks_stay_under_the_byte_budget(block_bed):
    """However many samples are browsed, the kept blocks stay under the cache's bytes."""
    from inspector.cache import nbytes
    from inspector.evaluate.block_eval import load_block
    from inspector.evaluate.block_view import BlockBrowser
    from inspector.wiring import Wiring

    draft, sample_set = load_block(
        str(block_bed.draft), [str(block_bed.samples)], target=str(block_bed.target)
    )
    n = min(6, len(sample_set))
    w = Wiring(tuple(range(draft.config.num_fc_blocks)))
    one = BlockBrowser(draft, sample_set, range(n), cache_bytes=1 << 40)
    budget = 2 * max(nbytes(one.blocks(j, w)) for j in range(n)) + 1
    b = BlockBrowser(draft, sample_set, range(n), cache_bytes=budget)
    for j in range(n):
        b.prepare(j, w)
        assert b._blocks.bytes <= budget
    assert len(b._blocks) < n
    assert b.ready(n - 1, w) and b.sample_accuracy(n - 1, w) is not None
