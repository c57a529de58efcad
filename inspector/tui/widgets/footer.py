"""The main screen's footer: Textual's, with the doctor, help and quit kept at its right end.

Textual's footer lays the keys out left to right and cuts what does not fit, so at 80 columns
`? help` and `q quit`, the last bindings, dropped off: the two keys a newcomer looks for. Here
they (and `d doctor`, which the first screen says to press next) sit in a group docked right with the command palette's key (Textual docks that one right on
its own; two widgets docked to one edge would overlap), and the other keys give way.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import HorizontalGroup
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

# the actions whose keys never drop off: the doctor (what the first screen says to press next),
# help and quit
KEPT = ("doctor", "help", "quit")


class KeptFooter(Footer):
    def compose(self) -> ComposeResult:
        kept: list[FooterKey] = []
        for widget in super().compose():
            if isinstance(widget, FooterKey) and widget.has_class("-command-palette"):
                widget.remove_class("-command-palette")  # the group docks it (app.tcss)
                widget.add_class("palette-key")
                kept.append(widget)
            elif isinstance(widget, FooterKey) and widget.action in KEPT:
                kept.append(widget)
            else:
                yield widget
        if kept:
            with HorizontalGroup(id="footer-kept"):
                yield from kept
