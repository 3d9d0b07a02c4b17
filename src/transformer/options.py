"""The command line's options, derived from the typed config.

jsonargparse reads the config dataclasses, their types and the docstring under each field, so
every key is an option with its type, default and help. ``normalize`` maps the other spellings
onto that one scheme: a key unique across sections without its section (``--max_steps``), ``-``
for ``_``, a true/false key alone meaning true, and the spellings of earlier versions.
"""

from __future__ import annotations

import argparse
import difflib
import re
from dataclasses import fields

from jsonargparse import ArgumentParser

from .config import COMMAND_SECTIONS
from .errors import UserError

BOOL_KEYS = {
    f"{s}.{f.name}" for s, cls in COMMAND_SECTIONS.items() for f in fields(cls) if f.type == "bool"
}
FLAT_KEYS = {f.name: f"{s}.{f.name}" for s, cls in COMMAND_SECTIONS.items() for f in fields(cls)}
FLAT_KEYS["preset"] = "model.preset"
# Spellings of earlier versions: old option -> new option.
RENAMED = {"beam": "decode.beam_size", "pre_norm": "model.norm_first",
           "src_vocab": "model.src_vocab_size", "tgt_vocab": "model.tgt_vocab_size"}  # fmt: skip
# Spellings that meant something else on some commands: an error names the new option.
MOVED = {"max_tokens": "decode.max_source_tokens"}


def normalize(argv: list[str], sections: tuple[str, ...]) -> list[str]:
    """Old and short spellings of options, in the one scheme the parser knows; ``sections``
    are the config sections the command takes."""
    out: list[str] = []
    args = list(argv)
    while args:
        arg = args.pop(0)
        if not arg.startswith("--") or arg == "--":
            out.append(arg)
            continue
        key, eq, value = arg[2:].partition("=")
        key = key.replace("-", "_")
        alone = not eq and (not args or args[0].startswith("--"))
        if key in MOVED and "train" not in sections:
            raise UserError(f"{arg.split('=')[0]} is now --{MOVED[key]}")
        if key in ("bf16", "train.bf16"):  # a true/false flag of earlier versions
            value = (value if eq else "true" if alone else args.pop(0)).lower()
            if value not in ("true", "false"):
                raise UserError(f"--bf16 must be true or false, got {value!r} "
                                "(it is now --runtime.precision bf16)")  # fmt: skip
            key, eq, alone, value = (
                "runtime.precision",
                "=",
                False,
                {"true": "bf16"}.get(value, "fp32"),
            )
        key = RENAMED.get(key, key)
        key = FLAT_KEYS.get(key, key) if "." not in key else key
        if key.partition(".")[0] not in sections and key != "model.preset":
            out.append(arg)  # a command option (--out, --no-color, ...), or a mistake
            continue
        out.append(f"--{key}={value}" if eq else f"--{key}")
        if key in BOOL_KEYS and alone:
            out[-1] += "=true"
    return out


def parse(
    parser: ArgumentParser, argv: list[str], sections: tuple[str, ...]
) -> tuple[argparse.Namespace, dict[str, dict]]:
    """(the command's own options, {section: {key: value}} of the config keys given)."""
    args = normalize(argv, sections)
    try:
        given = parser.parse_args(args, defaults=False).as_dict()
        everything = parser.parse_args(args).as_dict()
    except argparse.ArgumentError as error:
        raise UserError(one_line(str(error), parser)) from None
    config = {section: given[section] for section in COMMAND_SECTIONS if section in given}
    own = {key: value for key, value in everything.items() if key not in COMMAND_SECTIONS}
    return argparse.Namespace(**own), config


def one_line(message: str, parser: ArgumentParser) -> str:
    """An argparse / jsonargparse message on one line, with a suggestion for a misspelling."""
    text = " ".join(message.split())
    wrong_type = re.match(
        r'Parser key "(.+?)": Expected a <class \'(\w+)\'>\. Got value: (.*)', text
    )
    if wrong_type:
        key, expected, value = wrong_type.groups()
        finite = expected == "float" and value.strip().lower().lstrip("+-") in ("nan", "inf")
        text = f"--{key} must be {'a finite number' if finite else expected}, got {value!r}"
    if text.startswith("unrecognized arguments:"):
        unknown = text.split(":", 1)[1].split()[0]
        known = re.findall(r"--[\w.-]+", parser.format_help())
        by_name = {option.rpartition(".")[2].lstrip("-"): option for option in known}
        name = unknown.split("=")[0].lstrip("-").replace("-", "_")
        close = difflib.get_close_matches(name, by_name, n=1) or difflib.get_close_matches(
            unknown.split("=")[0], known, n=1
        )
        suggestion = by_name.get(close[0], close[0]) if close else None
        text = f"unknown option {unknown}" + (f"; did you mean {suggestion}?" if close else "")
    return f"{text} (see --help)"
