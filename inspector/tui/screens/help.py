"""Help (F1 / ?): every key, and what every number on the screen means."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

from inspector.engines import Engine
from inspector.tui.keys import actions
from inspector.tui.screens.dialogs import Dialog

# the engines' names from the registry (a rename is one edit in inspector/engines/)
_SGLANG, _VLLM = Engine.SGLANG.display, Engine.VLLM.display

METRICS = f"""\
## The first screen

Once the draft loads, the doctor's wiring search (on the first 8 samples, step 0, asked of the
weights, never of the config) finds the wiring the weights were trained on: it becomes the
current wiring (**●**, named *trained*), and the wiring an engine feeds is pinned beside it as the
reference (**◆**, *fed*): the one the config's layer ids select where that is not the trained
one, else what an engine capturing decoder-layer outputs feeds (the serve preset). The accuracy
bar gives each one's accuracy and τ on the sample and the set, and the **Δ ● − ◆** row their gap
(accuracy in points, τ in tokens); its last line says what to press next (`d`: the doctor's
verdict and the serving fix). Opened with `--wiring`, the app keeps that wiring and only names
the two.

## Positions

Position *j* (as in `eagle-inspect eval --positions`) feeds token x[j+1] with the hidden
states captured at position *j* and predicts token x[j+2]. The strip's cursor sits on
the predicted token. Positions whose loss mask is 0 (the prompt) are dimmed and never counted.
A sample of T tokens has T − 2 positions: the header's count, the sample list's **pos** column
and the range `g` takes.

## Token strip and sparkline

Colour by **hit/miss** (green hit, red miss, magenta miss whose true token is outside the draft
vocabulary) or by **p(true)** (`c`, red 0 → green 1); the strip's bottom edge is its legend. Misses are also **underlined**, so they show
without colour. `⏎` is a newline, `·` a space, `→` a tab; without a tokenizer the strip shows
token ids. The sparkline is p(true) by position (mean per cell).

**Rounds line** (under each line of tokens; `r` hides it): under each token, *a*, how many drafted
tokens a round whose first drafted token it is would accept under the serving settings (the bar's
title; `a` changes them): the round after the tokens before it, capped at the end of its generation
run (−, no digit, where no round drafts it: the prompt, and each run's first token, which the
prefill emits). The rounds an engine takes through the sample run as a rule under the tokens each
emits (its accepted tokens and the target's bonus token); each round's first token is **bold**.
The current wiring's replay; τ in the bar is 1 + accepted / rounds over them.

## Accuracy bar

Per wiring: this sample, then all samples (dim while the background fill still runs; the heading
says how many are done). **●** is the current wiring, **◆** the reference (the last pinned
wiring), **◇** older pins. `v` switches the numbers: ours, then the checkpoint layout's trainer,
then the other trainer. Which number is which:

* **all-tok** (ours): hits / loss-masked positions; a hit is the draft's top-1 (mapped to a target
  id through d2t) equal to the true next token, so a true token outside the draft vocab is a miss.
  This is what serving accepts, and `eagle-inspect eval`'s number.
* **in-vocab** (ours): the same over positions whose true token is in the draft vocabulary;
  **coverage** (`eval`) is the share of true tokens in the draft vocab, the ceiling of all-tok.
* **τ** (ours): the accept length an engine logs ({_VLLM}'s mean acceptance length, {_SGLANG}'s
  `avg_spec_accept_length`): 1 + accepted / rounds, pooled over every round, for this sample and
  for the samples replayed so far. The rounds are replayed exactly (`eagle-inspect accept`): each
  generation run starts after its prefill token, a round accepts the drafted tokens matching the
  target's continuation (in a last round also past the stop, as the engines count) and the next
  round starts after them; ≥ marks a lower bound, where a last round drafted past what the
  sample holds of the target's continuation. The bar's title names the engine settings: a chain
  of the app's TTT steps (or of 3) to start with; `a` sets draft steps, topk (a tree) and draft
  tokens as {_SGLANG}'s flags do, `+` / `-` add or drop a step. At a temperature (`a`, or `open
  --temperature T`; it needs `--target`) τ is the *expected* accept length under the engine's
  rule (a chain: {_VLLM}'s one-hot rule; a tree: {_SGLANG}'s target-only rule and its thresholds):
  every round's accepted count replaced by its expectation, from the target's distributions at
  the drafted nodes, as `accept SAMPLES --target T --temperature T` gives it. **all-tok s0..sK** lists every TTT step's accuracy (teacher forced).
* **full_acc_k** (speculators): a row hits when steps 0..k *all* match the verifier's argmax within
  the draft vocab (cumulative); its rows include the one after the last token (no true token needed).
* **cond_acc_k** (speculators): the full_acc_k hits over the rows whose steps < k all matched: the
  chance that step k holds given the chain held so far.
* **acc_k** (SpecForge): per step, teacher forced, the draft matches the target's *full-vocab*
  argmax (a label outside the draft vocab is a miss); rows where loss_mask[j+k] is set, the
  sample's last mask entry forced to 0.
* **simulated_acc_len** (SpecForge): Σ_k Π_{{m≤k}} acc_m (no +1).

**Which one is your training log?** A speculators log shows full_acc / cond_acc on verifier
targets, including the row after the last token; a SpecForge log shows acc_k against the target's
full-vocab argmax (its teacher runs in bf16, so a few near-tie rows may differ). The serving number
is ours (all-tok). The trainers' numbers need the verifier's norm + lm_head: open with `--target`.

* **Δ ● − ◆** (ours, with a reference pinned): the current row minus the reference's, each
  accuracy in points and τ in tokens (green where the current wiring is ahead).
* **flipped**: loss-masked positions whose hit/miss (ours) differs between ● and ◆ (✓→✗ were hits
  under the reference and are misses now). `f` steps through them.

## Position detail

* **input**: the token fed at this position; **true**: the next token (target id, draft id or OOV
  when the draft vocabulary lacks it); **pred**: the draft's top-1 (draft id, target id, p).
* **p(true)**: the draft's probability of the true token (0 when OOV); **rank**: 1 + the number of
  draft tokens with a higher logit; **loss**: −log p(true).
* **top-10**: the draft's ten most likely tokens with probabilities; ✓ marks the true token.
* **◆ ref**: the same position under the reference wiring.

## Draft tree panel (`T`, in place of the slot panel)

The tree an engine drafts, under the serving settings, for the round whose first drafted token is
the cursor's (row *j*: the round after x[0..j+1]): each node's token and cumulative probability
(the beam's score), depth-first and indented by depth (a chain is one branch). **✓** marks the
path the sample's own continuation takes, the tokens greedy verification accepts; the last line
says where it falls off (the true token no child drafted), or that every step was accepted and
the target adds its bonus token. When the panel is short, the path and the alternatives at each
of its steps stay.

## Two drafts (`b`, with `open --compare CKPT_B`)

The shown sample under the app's draft (A, the current wiring) and a second one (B, its own
wiring, `--compare-wiring`), under the same engine settings: each one's τ and all-tok on the
sample, then every row where they part (one hits and the other misses, or the round drafted
there accepts a different count), with the true token, each one's top-1, p(true) and round count.
Enter moves the cursor to the highlighted row. The set's B − A with its interval is
`eagle-inspect compare A B SAMPLES`.

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

Exports (`e`) go to `./eagle-inspect-exports/` (made on the first export; `open --out DIR`: another
folder) as `eagle-inspect-sample<i>-<name>.json`, never into an input folder.
"""


def keys_markdown() -> str:
    """Every key of the main screen with its title and text (from the bindings themselves)."""
    lines = ["## Keys", ""]
    for a in actions():
        key_text = " ".join(f"`{k}`" for k in dict.fromkeys(a.keys))
        lines.append(f"* {key_text} **{a.title}**: {a.text}.")
    lines.append("* `ctrl+p` **Command palette**: every action by name.")
    lines.append("")
    lines.append(
        "In the sample list, ↑/↓ move and Enter opens a sample. "
        "In the wiring editor, ↑/↓ pick the fc block, ←/→ or a digit the slot."
    )
    return "\n".join(lines)


# the docs page for each part of the main screen (by widget id, the focused one or its
# parents'): the help screen names the page of what is under the cursor first
DOCS = {
    "samples": ("the sample list", "docs/quickstart.md"),
    "strip": ("the token strip", "docs/reference/which-number.md"),
    "spark-row": ("the p(true) sparkline", "docs/reference/which-number.md"),
    "detail": ("the position panel", "docs/reference/which-number.md"),
    "slots": ("the slot panel", "docs/guides/low-acceptance.md"),
    "tree": ("the draft tree", "docs/guides/engine-figures.md"),
    "accuracy": ("the accuracy bar", "docs/reference/which-number.md"),
}
ALL_DOCS = (
    "Every key: docs/reference/keys.md; which number is which: docs/reference/which-number.md; "
    "the task guides: docs/guides/ (the site: `mkdocs serve` in the project)."
)


def docs_line(focus_ids: list[str]) -> str:
    """The docs page of the first of these widget ids (the focused widget, then its parents)
    that has one, then where every other page is."""
    for wid in focus_ids:
        if wid in DOCS:
            what, page = DOCS[wid]
            return f"**Docs for {what}** (under the cursor): {page}. {ALL_DOCS}"
    return ALL_DOCS


class HelpScreen(Dialog[None]):
    BINDINGS = [
        Binding("escape,q,f1,question_mark", "close", "close"),
    ]

    def __init__(self, focus_ids: list[str] | None = None) -> None:
        super().__init__()
        self.focus_ids = focus_ids or []

    def compose(self) -> ComposeResult:
        from rich.markdown import Markdown  # Rich's renderer: one widget, fast to draw

        text = (
            "# eagle-inspect\n\n"
            + docs_line(self.focus_ids)
            + "\n\n"
            + keys_markdown()
            + "\n\n"
            + METRICS
        )
        with VerticalScroll(id="help-box", classes="dialog"):
            yield Static(Markdown(text, hyperlinks=False), id="help-md")

    def action_close(self) -> None:
        self.close(None)
