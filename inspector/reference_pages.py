"""The documentation's reference pages, written from the code so that they cannot drift: one
section per command from its argparse parser (usage, description, every argument with its
help and default, the worked example its --help ends with), and the app's keys from its bindings.
The docs site's build hook (`mkdocs_hooks.py`) writes them; nothing at run time reads them."""

from __future__ import annotations

import argparse

from inspector.commands.exit_codes import WORDS, ExitCode

__all__ = ["commands_markdown", "keys_markdown"]


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps its subcommands nowhere public
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _help(action: argparse.Action, parser: argparse.ArgumentParser) -> str:
    text = action.help or ""
    if "%(" in text:
        params = {**vars(action), "prog": parser.prog}
        params = {k: (v.__name__ if callable(v) else v) for k, v in params.items()}
        try:
            text = text % params
        except (KeyError, TypeError, ValueError):
            pass
    return text


def _argument_rows(parser: argparse.ArgumentParser) -> list[str]:
    rows = ["| argument | what it does | default |", "|---|---|---|"]
    for a in parser._actions:
        if a.help == argparse.SUPPRESS or isinstance(a, argparse._HelpAction):
            continue
        if isinstance(a, argparse._SubParsersAction):
            continue
        if a.option_strings:
            metavar = "" if a.nargs == 0 else f" {a.metavar or a.dest.upper()}"
            name = ", ".join(f"`{o}{metavar}`" for o in a.option_strings)
        else:
            name = f"`{a.metavar or a.dest.upper()}`"
        default = a.default
        shown = (
            "" if default in (None, False, argparse.SUPPRESS) or a.nargs == 0 else f"`{default}`"
        )
        if a.choices and not isinstance(a.choices, dict):
            extra = " (one of " + ", ".join(f"`{c}`" for c in a.choices) + ")"
        else:
            extra = ""
        rows.append(f"| {name} | {_cell(_help(a, parser))}{extra} | {shown} |")
    return rows


def _command_section(name: str, parser: argparse.ArgumentParser, level: int) -> list[str]:
    usage = parser.format_usage().removeprefix("usage: ").strip()
    out = [f"{'#' * level} `{name}`", ""]
    if parser.description:
        out += [parser.description.strip(), ""]
    out += ["```text", usage, "```", ""]
    out += _argument_rows(parser) + [""]
    if parser.epilog:
        out += ["Worked example:", "", "```text", parser.epilog.strip(), "```", ""]
    for sub, p in _subparsers(parser).items():
        out += _command_section(f"{name} {sub}", p, level + 1)
    return out


def commands_markdown(parser: argparse.ArgumentParser) -> str:
    """Every command of `parser` (the CLI's), as the reference page's Markdown."""
    out = [
        "# Commands",
        "",
        "Written from the command-line parser at each docs build: every flag below is one "
        "`eagle-inspect` accepts today. Every command's exit status ("
        + ", ".join(f"{int(c)} {WORDS[c]}" for c in ExitCode)
        + ") and the keys of its `--json`: [Commands at a glance](command-table.md#exit-status).",
        "",
    ]
    for name, p in _subparsers(parser).items():
        out += _command_section(f"eagle-inspect {name}", p, 2)
    return "\n".join(out).rstrip() + "\n"


def _key_text(binding) -> str:
    shown = binding.key_display or binding.key
    keys = [shown] + [k for k in binding.key.split(",")[1:] if k != shown]
    return " / ".join(f"`{k}`" for k in keys)


def keys_markdown(groups: list[tuple[str, list]]) -> str:
    """The app's keys: (heading, bindings) per screen; a binding's tooltip reads 'Title: text'
    (the main screen's), else its description is the text."""
    out = [
        "# The app's keys",
        "",
        "Written from the app's bindings at each docs build (the footer, the help screen and the "
        "command palette read the same ones).",
        "",
    ]
    for heading, bindings in groups:
        out += [f"## {heading}", "", "| key | action |", "|---|---|"]
        for b in bindings:
            tip = getattr(b, "tooltip", "") or ""
            title, _, text = tip.partition(": ")
            words = f"**{title}**: {text}" if text else (b.description or b.action)
            out.append(f"| {_key_text(b)} | {_cell(words)} |")
        out.append("")
    return "\n".join(out).rstrip() + "\n"
