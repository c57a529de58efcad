"""The header: checkpoint, layout, device, dtype, sample; then the position, wirings and state."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text

from inspector.formatting import printable
from inspector.tui.widgets.fixed import FixedSizeStatic

if TYPE_CHECKING:
    from inspector.tui.state import ViewModel


class HeaderBar(FixedSizeStatic):
    """Two lines painted from the main screen's state and display modes."""

    def paint(self, st: ViewModel, *, status: str, mask_only: bool, colour: str) -> None:
        self.show(header_text(st, status=status, mask_only=mask_only, mode=colour))


def header_text(st: ViewModel, *, status: str, mask_only: bool, mode: str) -> Text:
    """Line 1: checkpoint, layout, device, dtype, sample and its positions. Line 2: wirings, state
    (the cursor is the position panel's: the header does not repaint on every move)."""
    session, sample, wiring, ref, pending = st.session, st.sample, st.wiring, st.ref, st.pending
    n_rows = st.view.n_rows if st.view is not None else None
    t = Text()
    t.append("eagle-inspect", style="bold")
    if session is None:
        t.append(f"  {printable(status)}")
        return t
    name = session.checkpoint.rstrip("/").rsplit("/", 1)[-1] or session.name
    t.append(f"  {printable(name)}", style="bold")
    t.append(f" ({session.layout})  {session.device} {session.dtype}  ")
    n = len(session.files)
    fname = session.files[sample].rsplit("/", 1)[-1] if 0 <= sample < n else "?"
    t.append(f"sample #{sample} of {n}", style="bold")
    t.append(f"  {printable(fname)}")
    if n_rows:
        t.append(f"  {n_rows} positions")
    t.append("\n")
    if wiring is not None:
        t.append("fc ← ", style="bold")
        t.append(session.wiring_label(wiring), style="bold")
        name = session.name_of(wiring)
        if name:
            t.append(f" {name}")
    if ref is not None:
        t.append("   ref ◆ ")
        t.append(session.wiring_label(ref))
        name = session.name_of(ref)
        if name:
            t.append(f" {name}")
    if session.ttt_steps > 1:
        t.append(f"   K={session.ttt_steps}")
    if mode == "p":
        t.append("   colour p(true)")
    if mask_only:
        t.append("   masked only")
    if pending:
        t.append("   ⋯ computing", style="bold italic")
    elif status:
        t.append(f"   {printable(status)}", style="italic")
    look = session.first_look
    if ref is not None and look is not None and look.gap and session.role(ref) == "fed":
        # last: a narrow header cuts these words before the state
        t.append(f"   ◆: {look.fed_words()}", style="dim italic")
    return t
