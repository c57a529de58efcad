"""The main screen's keys. Each binding carries its own words: `description` is the footer's short
label, `tooltip` reads 'Title: what it does' (the footer shows it on hover, the help screen lists
it, the command palette offers the title and the text). Nothing else describes an action.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.binding import Binding

from inspector.engines import Engine

# the engines' names from the registry (a rename is one edit in inspector/engines/)
_SGLANG = Engine.SGLANG.display

POSITION = Binding.Group("position", compact=True)
SAMPLE = Binding.Group("sample", compact=True)
MISS = Binding.Group("miss", compact=True)


def key(keys: str, action: str, short: str, title: str, text: str, **kw: object) -> Binding:
    """A binding whose tooltip is 'title: text' (the title must not hold ': ')."""
    assert ": " not in title, title
    return Binding(keys, action, short, tooltip=f"{title}: {text}", **kw)  # type: ignore[arg-type]


MAIN_KEYS: list[Binding] = [
    key(
        "left,h",
        "step(-1)",
        "pos",
        "Previous position",
        "move the cursor one position left",
        key_display="←",
        priority=True,
        group=POSITION,
    ),
    key(
        "right,l",
        "step(1)",
        "pos",
        "Next position",
        "move the cursor one position right",
        key_display="→",
        priority=True,
        group=POSITION,
    ),
    key(
        "home",
        "edge(False)",
        "first",
        "First position",
        "jump to the first position",
        show=False,
        priority=True,
    ),
    key(
        "end",
        "edge(True)",
        "last",
        "Last position",
        "jump to the last position",
        show=False,
        priority=True,
    ),
    key(
        "left_square_bracket",
        "sample(-1)",
        "sample",
        "Previous sample",
        "show the previous sample",
        key_display="[",
        group=SAMPLE,
    ),
    key(
        "right_square_bracket",
        "sample(1)",
        "sample",
        "Next sample",
        "show the next sample",
        key_display="]",
        group=SAMPLE,
    ),
    key(
        "n,f8",
        "jump('miss', 1)",
        "miss",
        "Next miss",
        "jump to the next loss-masked position the draft got wrong",
        key_display="n",
        group=MISS,
    ),
    key(
        "N,shift+f8",
        "jump('miss', -1)",
        "miss",
        "Previous miss",
        "jump to the previous miss",
        key_display="N",
        group=MISS,
    ),
    key(
        "f",
        "jump('flip', 1)",
        "flip",
        "Next flipped position",
        "jump to the next position whose hit/miss differs between the current and the "
        "reference wiring",
    ),
    key(
        "F",
        "jump('flip', -1)",
        "prev flipped",
        "Previous flipped position",
        "jump to the previous flipped position",
        show=False,
    ),
    key("g", "goto", "go to", "Go to position", "type a position number", show=False),
    key(
        "w",
        "wiring_editor",
        "wiring",
        "Edit the wiring",
        "choose the slot feeding each fc block, or a preset",
    ),
    key("t", "preset('train')", "train", "Train preset wiring", "feed fc what the trainer fed it"),
    key(
        "s",
        "preset('serve')",
        "serve",
        "Serve preset wiring",
        "feed fc the last N pre-norm slots, as a serving engine that captures decoder-layer "
        "outputs does",
    ),
    key(
        "p",
        "pin",
        "pin",
        "Pin or unpin the wiring",
        "pin the current wiring as the reference; on a pinned wiring, unpin it",
    ),
    key(
        "v",
        "cycle_metrics",
        "acc",
        "Accuracy view, ours or a trainer's",
        "switch the accuracy bar between ours (what serving sees), speculators' full_acc / "
        "cond_acc and SpecForge's acc (what their training logs show)",
    ),
    key(
        "a",
        "serving",
        "serving",
        "Serving settings",
        "choose the engine settings τ replays: draft steps, topk (1 is a chain) and draft tokens, "
        f"as {_SGLANG}'s flags name them, and the requests' temperature, top-k and top-p (τ is "
        "then expected under the engine's rule; needs --target); Ctrl+S there sweeps accept "
        "--sweep's grid and applies a row",
        show=False,
    ),
    key(
        "plus",
        "serving_steps(1)",
        "+step",
        "One more draft step",
        "replay τ with one more draft step per round (a tree keeps its topk and draft tokens)",
        key_display="+",
        show=False,
    ),
    key(
        "minus",
        "serving_steps(-1)",
        "-step",
        "One draft step fewer",
        "replay τ with one draft step fewer per round (a tree's draft tokens shrink to fit)",
        key_display="-",
        show=False,
    ),
    key(
        "r",
        "toggle_rounds",
        "rounds",
        "Rounds line under the tokens",
        "show or hide, under each token, what a round whose first drafted token it is accepts "
        "(a) and the rounds an engine takes (each round's first token bold, a rule under what it "
        "emits)",
        show=False,
    ),
    key(
        "T",
        "toggle_tree",
        "tree",
        "Draft tree at the cursor",
        "show the tree an engine drafts for the round whose first drafted token is the cursor's "
        "(each node's token and cumulative probability, the path the sample takes, where it "
        "falls off) in place of the slot panel, or the slots again",
        show=False,
    ),
    key(
        "m",
        "toggle_mask",
        "masked",
        "Masked positions only",
        "show and step through loss-masked positions only",
        show=False,
    ),
    key(
        "b",
        "compare",
        "vs B",
        "Compare with the second draft",
        "the shown sample under both drafts (open --compare CKPT_B): each one's top-1, p(true) "
        "and round acceptance, τ of each, and the rows where they part; Enter goes to one",
        show=False,
    ),
    key(
        "B",
        "switch_draft",
        "A/B",
        "Switch draft A/B",
        "show the other draft (open --compare CKPT_B) as you show another wiring: its "
        "predictions, τ and set totals; pin one (p) as the reference, and f / F step through "
        "the positions where the two differ",
        show=False,
    ),
    key(
        "c",
        "toggle_colour",
        "colour",
        "Colour by p(true) or hit/miss",
        "switch the token colouring",
        show=False,
    ),
    key(
        "o",
        "cycle_sort",
        "sort",
        "Cycle the sample sort",
        "sort the sample list by #, positions, cur, ref, Δ",
        show=False,
    ),
    key(
        "e",
        "export",
        "export",
        "Export the sample",
        "write the current sample's predictions under every wiring computed so far to a JSON "
        "file in ./eagle-inspect-exports/ (open --out DIR: another folder)",
        show=False,
    ),
    key("d", "doctor", "doctor", "Doctor", "diagnose the wiring and config from a few samples"),
    key("f1,question_mark", "help", "help", "Help", "keys and metric definitions", key_display="?"),
    key("q", "quit", "quit", "Quit", "leave the inspector"),
]

KEY_NAMES = {
    "left": "←",
    "right": "→",
    "left_square_bracket": "[",
    "right_square_bracket": "]",
    "question_mark": "?",
    "plus": "+",
    "minus": "-",
    "f1": "F1",
    "f8": "F8",
    "shift+f8": "Shift+F8",
    "home": "Home",
    "end": "End",
}


@dataclass(frozen=True)
class ActionHelp:
    action: str
    title: str
    text: str
    keys: tuple[str, ...]  # as the help screen writes them

    @property
    def name(self) -> str:
        """The action without its arguments ("preset('train')" -> "preset")."""
        return self.action.split("(")[0]


def describe(binding: Binding) -> tuple[str, str]:
    """(title, text) of a binding made by `key`."""
    title, _, text = binding.tooltip.partition(": ")
    return title, text


def actions(bindings: list[Binding] = MAIN_KEYS) -> list[ActionHelp]:
    """Every action once, in binding order, with all its keys."""
    out: dict[str, ActionHelp] = {}
    for b in bindings:
        names = tuple(KEY_NAMES.get(k.strip(), k.strip()) for k in b.key.split(","))
        if b.action in out:
            prev = out[b.action]
            out[b.action] = ActionHelp(b.action, prev.title, prev.text, prev.keys + names)
        else:
            title, text = describe(b)
            out[b.action] = ActionHelp(b.action, title, text, names)
    return list(out.values())
