"""The CLI's exit statuses, one contract for every command (the Commands-at-a-glance page holds
the table):

- 0 `OK`: the command ran and found nothing wrong (or does not judge: eval, accept, compare, sweep
  and capture report figures);
- 1 `PROBLEM`: it ran and found a problem: an error-level doctor finding (or a `--write-fixed`
  checkpoint that does not verify), a reconcile verdict other than the draft served as it is;
- 2 `BAD_INPUT`: bad usage or input (an unknown flag, a missing file, a field a loader refuses, a
  width mismatch, `open` without a terminal): one line on stderr and what the command needs;
- 3 `GATE`: a `--fail-under` gate failed (the report is printed first, the gate's line on stderr);
- 4 `FAILED`: the command could not finish: out of memory, a device error, or a crash (its
  traceback follows); the run says nothing of the draft, so it is kept apart from 1;
- 130 `INTERRUPTED`: Ctrl-C.
"""

from __future__ import annotations

import traceback
from enum import IntEnum

__all__ = ["WORDS", "ExitCode", "failure_line", "for_verdict"]


class ExitCode(IntEnum):
    OK = 0
    PROBLEM = 1
    BAD_INPUT = 2
    GATE = 3
    FAILED = 4
    INTERRUPTED = 130


# each status in a few words (the reference pages' one-line summary)
WORDS = {
    ExitCode.OK: "nothing wrong",
    ExitCode.PROBLEM: "a problem found",
    ExitCode.BAD_INPUT: "bad input",
    ExitCode.GATE: "a gate failed",
    ExitCode.FAILED: "the run could not finish",
    ExitCode.INTERRUPTED: "interrupted",
}

# reconcile's verdicts (`Verdict` values) that find nothing wrong: the engine's figure is what the
# draft gives fed the wiring it was trained on, or what the engine's synthetic acceptance forces
CLEAN_VERDICTS = frozenset({"as_is", "synthetic"})


def for_verdict(verdict: str) -> ExitCode:
    """reconcile's exit status for its verdict (a `Verdict` or its value): 0 for the draft served
    as it is (or a synthetic acceptance), 1 for the rest: wrong wiring, an engine-side fault
    (engine_fault, engine_gate, engine_slot, engine_backend), the target's hidden state
    (target_hidden_state), a log of other requests (other_data), and a verdict the witnesses
    leave undecided."""
    value = getattr(verdict, "value", verdict)
    return ExitCode.OK if value in CLEAN_VERDICTS else ExitCode.PROBLEM


def failure_line(e: Exception) -> str:
    """The one line of a run that could not finish (`FAILED`): the error's first line. Out of
    memory and device errors (RuntimeError, MemoryError) are that line alone; anything else is a
    crash, a bug, and its traceback goes to stderr first."""
    if not isinstance(e, (RuntimeError, MemoryError)):
        traceback.print_exc()
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
