"""``transformer COMMAND --help``: what a person reads first, so short and in the order they need.

The usage line puts the positional arguments first (``transformer translate MODEL_DIR
[options]``); then the command's own options; then each config section it takes, one line per
key with its type and its one default. It is rendered from the same parser that parses the
command line, so it cannot list an option that does not exist or miss one that does.
"""

from __future__ import annotations

import argparse
import re
import shutil
import textwrap
import typing

from jsonargparse import ArgumentParser

from .options import COMMAND_SECTIONS

WIDTH = 100  # at most; narrower terminals wrap at their width
COLUMN = 30  # where the help text of an option starts


def _key_type(dest: str) -> object | None:
    """The annotated type of config key ``section.key`` (None for a command's own option)."""
    section, _, key = dest.partition(".")
    cls = COMMAND_SECTIONS.get(section)
    return typing.get_type_hints(cls).get(key) if cls is not None and key else None


def _metavar(action: argparse.Action) -> str:
    if action.nargs == 0 or not action.option_strings:  # a flag, or a positional argument
        return ""
    if action.choices:
        return "{" + ",".join(str(c) for c in action.choices) + "}"
    kind = _key_type(action.dest)
    if kind is None:
        return (action.metavar or action.dest.rpartition(".")[2]).upper()
    names = [t.__name__ for t in typing.get_args(kind) or (kind,) if t is not type(None)]
    return {"bool": "{true,false}", "int": "INT", "float": "NUMBER"}.get(names[0], "TEXT")


def _default(action: argparse.Action) -> str:
    """`` (default: X)`` once, unless the help text already says what the default is."""
    text, default = action.help or "", action.default
    if "default:" in text or default is None or default is argparse.SUPPRESS or default == "":
        return ""
    if action.nargs == 0:  # a flag: given or not
        return ""
    shown = str(default).lower() if isinstance(default, bool) else default
    return f" (default: {shown})"


def _option_lines(action: argparse.Action, width: int) -> list[str]:
    name = ", ".join(sorted(action.option_strings, key=len, reverse=True)) or action.dest.upper()
    head = f"  {name} {_metavar(action)}".rstrip()
    text = " ".join((action.help or "").split()) + _default(action)
    wrapped = textwrap.wrap(text, width - COLUMN) or [""]
    if len(head) + 2 > COLUMN:
        return [head, *(" " * COLUMN + line for line in wrapped)]
    return [head.ljust(COLUMN) + wrapped[0], *(" " * COLUMN + line for line in wrapped[1:])]


def command_help(name: str, parser: ArgumentParser, description: str, sections) -> str:
    """The help text of command ``name`` from its ``parser``."""
    width = min(WIDTH, shutil.get_terminal_size((WIDTH, 24)).columns)
    actions = [a for a in parser._actions if a.dest != "help"]
    positional = [a for a in actions if not a.option_strings]
    config = {section: [a for a in actions if a.dest.startswith(f"{section}.")]
              for section in sections}  # fmt: skip
    configured = {a for group in config.values() for a in group}
    own = [a for a in actions if a.option_strings and a not in configured
           and a.dest not in sections]  # fmt: skip
    args = " ".join(a.dest.upper() for a in positional)
    lines = [f"usage: transformer {name} {args} [options]".replace("  ", " "), ""]
    lines += [*textwrap.wrap(description, width), ""]
    if positional:
        lines += ["arguments:", *(line for a in positional for line in _option_lines(a, width))]
        lines.append("")
    lines += ["options:", "  -h, --help".ljust(COLUMN) + "show this help and exit"]
    lines += [line for a in own for line in _option_lines(a, width)]
    for section, group in config.items():
        if not group:
            continue
        doc = " ".join((COMMAND_SECTIONS[section].__doc__ or "").split())
        summary = re.split(r"\.\s+(?=[A-Z`\"(])", doc)[0].rstrip(".")
        lines += ["", f"{section}: {summary[0].lower()}{summary[1:]}"]
        lines += [line for a in group for line in _option_lines(a, width)]
    footer = (
        "A key unique across sections may drop its section (--max_steps for "
        "--train.max_steps); every key is also a YAML key (docs/configuration.md)."
    )
    lines += ["", *textwrap.wrap(footer, width)]
    return "\n".join(lines)
