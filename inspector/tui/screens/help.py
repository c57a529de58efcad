"""Help (F1 / ?): every key, and what every number on the screen means."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

KEY_NAMES = {
    "left": "←",
    "right": "→",
    "left_square_bracket": "[",
    "right_square_bracket": "]",
    "question_mark": "?",
    "f1": "F1",
    "f8": "F8",
    "shift+f8": "Shift+F8",
    "home": "Home",
    "end": "End",
}

METRICS = """\
## Positions

Position *j* (as in `eagle-inspect eval --positions`) feeds token x[j+1] with the hidden
states captured at position *j* and predicts token x[j+2]. The strip's cursor sits on
the predicted token. Positions whose loss mask is 0 (the prompt) are dimmed and never counted.

## Token strip and sparkline

Colour by **hit/miss** (green hit, red miss, magenta miss whose true token is outside the draft
vocabulary) or by **p(true)** (`c`, red 0 → green 1). Misses are also **underlined**, so they show
without colour. `⏎` is a newline, `·` a space, `→` a tab; without a tokenizer the strip shows
token ids. The sparkline is p(true) by position (mean per cell).

## Accuracy bar

* **all-tok**: hits / loss-masked positions, where a hit means the draft's top-1 (mapped to a
  target id through d2t) equals the true next token. A true token outside the draft vocabulary is
  a miss, as in serving. The same numbers as `eagle-inspect eval`.
* **in-vocab**: the same over positions whose true token is in the draft vocabulary.
* **sample** columns are the current sample; **all samples** sums every sample (the count in
  brackets shows how many are done while the background fill runs).
* **●** is the current wiring, **◆** the reference (the last pinned wiring), **◇** older pins.
* **flipped**: loss-masked positions whose hit/miss differs between ● and ◆ (✓→✗ were hits under
  the reference and are misses now). `f` steps through them.
* With `--ttt-steps K` > 1: all-tok of each teacher-forced step and **τ**, the expected accepted
  length of a greedy chain, 1 + Σ_k Π_{m≤k} c_m, where c_m is
  the accuracy of step m given steps < m hit at the same position.

## Position detail

* **input**: the token fed at this position; **true**: the next token (target id, draft id or OOV
  when the draft vocabulary lacks it); **pred**: the draft's top-1 (draft id, target id, p).
* **p(true)**: the draft's probability of the true token (0 when OOV); **rank**: 1 + the number of
  draft tokens with a higher logit; **loss**: −log p(true).
* **top-10**: the draft's ten most likely tokens with probabilities; ✓ marks the true token.
* **◆ ref**: the same position under the reference wiring.

## Slot panel

* **slot / HF**: the captured hidden state and its index in HF `output_hidden_states`
  (0 = embeddings).
* **|h|@pos**: its L2 norm at the cursor; **mean**: mean L2 norm over the sample's loss-masked
  positions. NaN/Inf are shown as such, with ⚠ on the slot.
* **→fc**: the fc block(s) it feeds under the current wiring; **|W_b|**: the Frobenius norm of that
  block of fc.weight (blocks trained on large-norm slots have small weights: a fingerprint of the
  slot each block was trained on). **ref→fc**: the same under the reference.

## Wiring

fc takes N slots in order. **train** feeds what the trainer fed; **serve** feeds the last N pre-norm
slots, which is what an engine capturing decoder-layer outputs feeds. A gap between them is a
train/serve mismatch; `d` runs the doctor, which searches for the wiring the draft was trained on.

Exports (`e`) go to the working directory as `eagle-inspect-sample<i>-<name>.json`, never into an
input folder.
"""


def keys_markdown() -> str:
    from inspector.tui.screens.main import ACTIONS, MainScreen

    by_action: dict[str, list[str]] = {}
    for b in MainScreen.BINDINGS:
        assert isinstance(b, Binding)
        keys = [KEY_NAMES.get(k.strip(), k.strip()) for k in b.key.split(",")]
        by_action.setdefault(b.action, []).extend(keys)
    lines = ["## Keys", ""]
    for action, keys in by_action.items():
        title, desc = ACTIONS.get(action, (action, ""))
        key_text = " ".join(f"`{k}`" for k in dict.fromkeys(keys))
        lines.append(f"* {key_text} **{title}**: {desc}")
    lines.append("* `ctrl+p` **Command palette**: every action by name")
    lines.append("")
    lines.append(
        "In the sample list, ↑/↓ move and Enter opens a sample. "
        "In the wiring editor, ↑/↓ pick the fc block, ←/→ or a digit the slot."
    )
    return "\n".join(lines)


class HelpScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("escape,q,f1,question_mark", "close", "close"),
    ]

    def compose(self) -> ComposeResult:
        from rich.markdown import Markdown  # Rich's renderer: one widget, fast to draw

        text = "# eagle-inspect\n\n" + keys_markdown() + "\n\n" + METRICS
        with VerticalScroll(id="help-box", classes="dialog"):
            yield Static(Markdown(text, hyperlinks=False), id="help-md")

    def action_close(self) -> None:
        self.dismiss(None)
