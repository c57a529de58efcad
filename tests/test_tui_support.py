"""Helpers shared by the app tests (no tests here): data sets, app factory, settling, screen text."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from inspector.session import Inputs

DEMO = Path(__file__).resolve().parent.parent / "assets" / "demo"


def demo_available() -> bool:
    return (DEMO / "draft" / "config.json").is_file() and (DEMO / "samples" / "train").is_dir()


needs_demo = pytest.mark.skipif(not demo_available(), reason="assets/demo not built")


def demo_inputs() -> Inputs:
    tok = DEMO / "target" / "tokenizer.json"
    return Inputs(
        DEMO / "draft",
        [str(DEMO / "samples" / "train")],
        DEMO / "target",
        None,
        tok if tok.is_file() else None,
        True,
    )


def write_tokenizer(path: Path, vocab_size: int) -> Path:
    """A word-level tokenizer.json over ids 0..vocab_size-1 with some whitespace tokens."""
    from tokenizers import Tokenizer, models

    vocab = {f"w{i}": i for i in range(vocab_size)}
    specials = {1: " ", 2: "\n", 3: "\t", 4: " the", 5: "x\ny"}
    for i, text in specials.items():
        del vocab[f"w{i}"]
        vocab[text] = i
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="w0"))
    tok.save(str(path))
    return path


def synthetic_inputs(
    root: Path, *, n_samples: int = 3, seq_len: int = 64, tokenizer=True
) -> Inputs:
    from inspector.synthetic import SyntheticSpec, write_synthetic

    draft, samples = write_synthetic(
        root, SyntheticSpec(size="tiny", n_samples=n_samples, seq_len=seq_len)
    )
    tok = write_tokenizer(root / "tokenizer.json", 256) if tokenizer else None
    return Inputs(draft, [str(samples)], None, None, tok, False)


def make_app(inputs: Inputs, **kw: Any):
    """The app on `inputs`; without the first look (the doctor's search, then the trained wiring
    beside the fed one) unless `first_look=True`: most tests start from the configured wiring
    alone and pin their own."""
    from inspector.tui.app import InspectorApp

    kw.setdefault("first_look", False)
    return InspectorApp(inputs, **kw)


async def settle(pilot, *, fill: bool = True, timeout: float = 30.0) -> None:
    """Pump the app until the view is shown, nothing is pending (nor waiting for a pause in the
    input to be painted) and (optionally) fill is done."""
    import time

    app = pilot.app
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        await pilot.pause(0.02)
        main = app.main
        eng = app.device
        if main.state.session is None and main.status == "load failed":
            return
        if (
            main.state.session is not None
            and not main.state.pending
            and not main.batch_pending
            and (
                main.state.view is not None
                or main.state.wiring is None
                or main.state.errors.get(main.state.sample)
            )
            and eng is not None
            and eng.idle
            and (not fill or not eng.fill_pending())
        ):
            await pilot.pause()
            if eng.idle and (not fill or not eng.fill_pending()) and not main.batch_pending:
                return
    raise AssertionError("app did not settle")


async def until(pilot, predicate, timeout: float = 20.0) -> None:
    import time

    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if predicate():
            return
        await pilot.pause(0.02)
    raise AssertionError("condition not reached")


def screen_text(app) -> str:
    """The screen as plain text, one line per row."""
    update = app.screen._compositor.render_full_update()
    return "\n".join("".join(seg.text for strip in line for seg in strip) for line in update.strips)


def widget_text(app, selector: str) -> str:
    """Plain text of a Static's current content."""
    from rich.console import Console

    w = app.main.query_one(selector)
    console = Console(width=max(w.content_size.width, 40), color_system=None)
    with console.capture() as cap:
        console.print(w.content)
    return cap.get()


class GatedEvaluator:
    """Wraps an Evaluator so predict() waits for a gate (tests of the UI while the device is busy)."""

    def __init__(self, ev: Any) -> None:
        self._ev = ev
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()

    def predict(self, *a: Any, **kw: Any) -> Any:
        self.entered.set()
        self.gate.wait(30)
        return self._ev.predict(*a, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ev, name)


def eval_json(
    capsys, inputs, *wirings: str, positions: bool = False, extra=(), command: str = "eval"
) -> dict:
    """The CLI's JSON (`command`, eval by default) on the app's inputs: the numbers the app must
    show, computed on one torch thread as the app's device thread runs."""
    argv = [command, str(inputs.checkpoint), *inputs.samples, "--json", *extra]
    if inputs.target is not None:
        argv += ["--target", str(inputs.target)]
    for w in wirings:
        argv += ["--wiring", w]
    if positions:
        argv.append("--positions")
    import torch

    from inspector.cli import main as cli_main

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the app's device thread runs on 2 cores (one is the UI's)
    try:
        capsys.readouterr()
        assert cli_main(argv) in (0, 1)
        return json.loads(capsys.readouterr().out)
    finally:
        torch.set_num_threads(threads)
