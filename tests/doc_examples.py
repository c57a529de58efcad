"""The docs' console examples, run and compared with what they show.

A console example is a fenced block tagged `console`: lines starting with `$ ` are commands, the
lines after one are what it printed (stdout and stderr together). A page's blocks run in order
in one scratch folder, so an example may use what an earlier one wrote; `assets` and `tests`
there point at the project's own. An HTML comment right before a block sets how it runs:

    <!-- example: skip REASON -->      not run (the reason is the test's skip reason)
    <!-- example: env VAR -->          run only where VAR is set (a CI stage's results: $VAR)

A command must exit 0, unless its output's last line is `[exit N]`: then it must exit N.

Comparison (`compare`), word by word in order after normalising both sides (so a table cell by
cell, and a line or panel wrapped at another width the same): table rules and box and panel
borders dropped,
the scratch folder's path made `.`, other absolute paths `<path>`, durations and rates
`<time>`. A `...` line skips any number of printed words. Every word and every count must be equal; a decimal figure may differ by one unit of its
last printed digit (a figure that rounds the other way on another machine's arithmetic), no more.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(
    r"(?:<!--\s*example:\s*(?P<meta>[^>]*?)\s*-->\s*\n)?^```console\n(?P<body>.*?)^```",
    re.S | re.M,
)
RULE = re.compile(r"^[\s━─┏┓┗┛┡┩╇┳┻╋┣┫╭╮╰╯└┘┌┐├┤┬┴┼═╞╡╪]+$")
# box and panel drawing: decoration whose run lengths and positions follow the terminal's width
BORDERS = re.compile(r"[│┃╭╮╰╯─━═┏┓┗┛┡┩╇┳┻╋┣┫└┘┌┐├┤┬┴┼╞╡╪]")
TIME = re.compile(r"\b\d[\d,]*(?:\.\d+)?\s?(?:s|ms|min|tokens/s|it/s|samples/s|positions/s)\b")
NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# The terminal width the examples run at: the docs' code-block width, the widest table the docs
# show (the demo's `eval` table, 124 columns) fitting without a cell wrapped. The site's CSS
# (docs/stylesheets/console.css) sizes each console block's font so its widest table fits the
# page; a wider table would be printed squeezed here, as a terminal this wide shows it.
DOCS_COLUMNS = 124


@dataclass
class Example:
    command: str
    expected: list[str]
    line: int  # the command's line in the file

    @property
    def exit_status(self) -> int:
        """0, or what a last output line `[exit N]` says the command exits with (the doctor and
        reconcile exit 1 on a problem found, `--fail-under` 3 below its gate)."""
        last = next((x for x in reversed(self.expected) if x.strip()), "")
        m = re.fullmatch(r"\[exit (\d+)\]", last.strip())
        return int(m.group(1)) if m else 0

    @property
    def output(self) -> list[str]:
        """The expected output, the `[exit N]` line left out."""
        if self.exit_status == 0:
            return self.expected
        cut = max(i for i, x in enumerate(self.expected) if x.strip())
        return self.expected[:cut]


@dataclass
class Block:
    path: Path
    line: int
    examples: list[Example] = field(default_factory=list)
    skip: str | None = None
    env: str | None = None


def blocks(path: Path) -> list[Block]:
    text = path.read_text(encoding="utf-8")
    out = []
    for m in BLOCK.finditer(text):
        start = text.count("\n", 0, m.start("body")) + 1
        b = Block(path, start)
        meta = (m["meta"] or "").strip()
        if meta.startswith("skip"):
            b.skip = meta.removeprefix("skip").strip() or "marked skip"
        elif meta.startswith("env "):
            b.env = meta.split()[1]
        elif meta:
            raise ValueError(f"{path}:{start}: unknown example marker {meta!r}")
        cont = False
        for i, line in enumerate(m["body"].splitlines()):
            if cont:  # a command continued with a trailing backslash
                b.examples[-1].command += "\n" + line
                cont = line.endswith("\\")
                continue
            if line.startswith("$ "):
                b.examples.append(Example(line[2:], [], start + i))
                cont = line.endswith("\\")
            elif b.examples:
                b.examples[-1].expected.append(line)
            elif line.strip():
                raise ValueError(f"{path}:{start + i}: output before any command")
        out.append(b)
    return out


def normalise(line: str, scratch: str) -> str | None:
    """The line as compared (None: a table rule, nothing to compare)."""
    line = ANSI.sub("", line)
    if RULE.match(line) or not line.strip():
        return None
    if scratch:
        line = line.replace(scratch + "/", "").replace(scratch, ".")
    line = BORDERS.sub(" ", line)
    line = TIME.sub("<time>", line)
    line = re.sub(r"(?<![\w.])/[^\s|,;:()'\"]+", "<path>", line)
    return " ".join(line.split())


def _tokens(line: str) -> list[str]:
    out, pos = [], 0
    for m in NUMBER.finditer(line):
        out.append(line[pos : m.start()])
        out.append(m.group())
        pos = m.end()
    out.append(line[pos:])
    return out


def _number_close(want: str, got: str) -> bool:
    if want == got:
        return True
    try:
        a, b = float(want.replace(",", "")), float(got.replace(",", ""))
    except ValueError:
        return False
    if "." not in want or "e" in want.lower():
        return False  # counts are exact
    decimals = len(want.split(".")[1])
    return abs(a - b) <= 10.0**-decimals * (1 + 1e-9)


def _word_matches(want: str, got: str) -> bool:
    a, b = _tokens(want), _tokens(got)
    if len(a) != len(b):
        return False
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        if i % 2 == 0:
            if x != y:
                return False
        elif not _number_close(x, y):
            return False
    return True


def line_matches(want: str, got: str) -> bool:
    """Word by word (`_word_matches`): equal words, counts, and decimals to one unit."""
    a, b = want.split(), got.split()
    return len(a) == len(b) and all(_word_matches(x, y) for x, y in zip(a, b, strict=True))


def _words(lines: list[str], scratch: str) -> list[str]:
    return [w for x in lines if (n := normalise(x, scratch)) is not None for w in n.split()]


def compare(expected: list[str], printed: str, scratch: str = "") -> str | None:
    """None when `printed` shows what `expected` does; else why not, in one paragraph. Compared
    as the stream of words (a table cell by cell, a line wrapped elsewhere the same), `...`
    lines cutting it into runs that must appear in order, the first at the start."""
    runs: list[list[str]] = [[]]
    for x in expected:
        if x.strip() == "...":
            runs.append([])
        else:
            runs[-1] += _words([x], scratch)
    got = _words(printed.splitlines(), scratch)
    j = 0
    for i, run in enumerate(runs):
        if not run:
            continue
        starts = [j] if i == 0 else range(j, len(got) - len(run) + 1)
        k = next(
            (
                k
                for k in starts
                if k + len(run) <= len(got)
                and all(
                    _word_matches(w, g) for w, g in zip(run, got[k : k + len(run)], strict=True)
                )
            ),
            None,
        )
        if k is None:
            if i == 0:  # say where the first difference is
                bad = next(
                    (n for n, w in enumerate(run) if n >= len(got) or not _word_matches(w, got[n])),
                    len(run),
                )
                shown = " ".join(run[max(0, bad - 6) : bad + 6])
                printed_here = " ".join(got[max(0, bad - 6) : bad + 6]) or "(nothing)"
                return f"the doc shows  ... {shown} ...\nthe command printed ... {printed_here} ..."
            return f"not printed (after skipping): {' '.join(run[:14])} ..."
        j = k + len(run)
    return None


def scratch_folder(tmp: Path) -> Path:
    for name in ("assets", "tests"):
        (tmp / name).symlink_to(ROOT / name)
    return tmp


def run(example: Example, cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    p = subprocess.run(
        ["bash", "-c", example.command],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=600,
    )
    return p.returncode, p.stdout


def environment() -> dict[str, str]:
    env = dict(os.environ)
    env.update(COLUMNS=str(DOCS_COLUMNS), NO_COLOR="1", TERM="dumb", HF_HUB_OFFLINE="1")
    env.update(TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    return env


def run_pages(pages: list[Path]) -> int:
    """Every console example of `pages` run and compared, as the test does, without pytest (a
    fresh environment holding only what the README installs has none). Prints one line per
    page and each failure; 0 when all pass, 1 otherwise."""
    import tempfile

    env = environment()
    failed = 0
    for page in pages:
        name = page.relative_to(ROOT) if page.is_relative_to(ROOT) else page
        with tempfile.TemporaryDirectory() as tmp:
            cwd = scratch_folder(Path(tmp))
            ran, skipped, why = 0, 0, None
            for b in blocks(page):
                if b.skip or (b.env and not os.environ.get(b.env)):
                    skipped += len(b.examples)
                    continue
                for ex in b.examples:
                    rc, out = run(ex, cwd, env)
                    where = f"{name}:{ex.line}: $ {ex.command}"
                    if rc != ex.exit_status:
                        why = (
                            f"{where}\nexited {rc}, the page says {ex.exit_status}:\n{out[-3000:]}"
                        )
                    elif (diff := compare(ex.output, out, str(cwd))) is not None:
                        why = f"{where}\n{diff}\n--- printed:\n{out[-4000:]}"
                    if why:
                        break
                    ran += 1
                if why:
                    break
        print(f"{'FAIL' if why else 'ok  '} {name}: {ran} ran, {skipped} skipped", flush=True)
        if why:
            print(why, flush=True)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    import sys

    args = [Path(a).resolve() for a in sys.argv[1:]]
    pages = args or [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    sys.exit(run_pages([p for p in pages if blocks(p)]))
