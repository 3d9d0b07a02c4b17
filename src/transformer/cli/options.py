"""The command line's options, derived from the typed config.

jsonargparse reads the config dataclasses, their types and the docstring under each field, so
every key is an option with its type, default and help. ``normalize`` maps the other spellings
onto that one scheme: a key unique across sections without its section (``--max_steps``), ``-``
for ``_``, and a true/false key alone meaning true. ``--SECTION FILE`` (``--decode FILE``) reads
a YAML file of that section's keys, checked as ``--config`` is (``config.files.read_section``);
the section's own options go on top of it.
"""

from __future__ import annotations

import argparse
import difflib
import re
from dataclasses import fields
from pathlib import Path

from jsonargparse import ArgumentParser

from ..config import SECTIONS, RuntimeConfig
from ..config.files import read_section
from ..errors import UserError
from ..model_dir.layout import WHICH, folder_kind, ignored_choice, is_checkpoint_folder
from ..serve.config import ServeConfig

# Every section a command can take: the run's, and the service's (never saved with a run).
COMMAND_SECTIONS = {**SECTIONS, "serve": ServeConfig}
BOOL_KEYS = {
    f"{s}.{f.name}" for s, cls in COMMAND_SECTIONS.items() for f in fields(cls) if f.type == "bool"
}
FLAT_KEYS = {f.name: f"{s}.{f.name}" for s, cls in COMMAND_SECTIONS.items() for f in fields(cls)}
FLAT_KEYS["preset"] = "model.preset"
# The values that go to a tokenizer or into output, which must be UTF-8 text. Every other text
# value is a path or one of a few choices: a path may hold any bytes on Linux.
TEXT_KEYS = frozenset({"sentence", "data.src_lang", "data.tgt_lang", "decode.target_language",
                       "serve.host", "serve.api_key"})  # fmt: skip


def normalize(argv: list[str], sections: tuple[str, ...]) -> list[str]:
    """Short spellings of options, in the one scheme the parser knows; ``sections`` are the
    config sections the command takes."""
    out: list[str] = []
    args = list(argv)
    while args:
        arg = args.pop(0)
        if not arg.startswith("--") or arg == "--":
            out.append(arg)
            continue
        key, eq, value = arg[2:].partition("=")
        key = key.replace("-", "_")
        alone = not eq and (not args or args[0].startswith("-"))  # before -o FILE too
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
    args, files = section_files(normalize(argv, sections), sections)
    unknown = unknown_option(args, parser)
    if unknown is not None:
        raise UserError(unknown)
    try:
        given = parser.parse_args(args, defaults=False).as_dict()
        everything = parser.parse_args(args).as_dict()
    except argparse.ArgumentError as error:
        raise UserError(one_line(str(error), option_names(parser))) from None
    empty = [key for key, value in given.items() if value == "" and key not in COMMAND_SECTIONS]
    if empty:  # a shell variable left unset: as a path it would be the current folder
        name = f"--{empty[0]}" if f"--{empty[0]}" in option_names(parser) else empty[0].upper()
        raise UserError(f"{name} is empty: give it a value")
    for key in TEXT_KEYS:
        section, _, name = key.rpartition(".")
        value = given.get(section, {}).get(name) if section else given.get(key)
        wrong = not_utf8(value) if isinstance(value, str) else None
        if wrong:
            option = f"--{key}" if f"--{key}" in option_names(parser) else key.upper()
            raise UserError(f"{option} is not valid UTF-8 ({wrong})")
    config = {section: given[section] for section in COMMAND_SECTIONS if section in given}
    known = set(option_names(parser))
    for section, path in files.items():  # the options given go on top of the file's keys
        found = read_section(path, section, COMMAND_SECTIONS[section])
        unused = [key for key in found if key != "preset" and f"--{section}.{key}" not in known]
        if unused:  # a key the command does not take as an option (commands.py: skip)
            raise UserError(f"{path}: this command has no use for {section}.{unused[0]}: "
                            "leave it out")  # fmt: skip
        config[section] = {**found, **config.get(section, {})}
    own = {key: value for key, value in everything.items() if key not in COMMAND_SECTIONS}
    if "checkpoint" in own:
        folders = own.get("runs") or [own.get("model_dir")]
        own["checkpoint"] = checkpoint_choice(own["checkpoint"], [f for f in folders if f])
    return argparse.Namespace(**own), config


def not_utf8(text: str) -> str | None:
    """What in ``text`` is not UTF-8 (e.g. "byte 0xff"), or None. Python hands a command-line
    argument's undecodable byte over as a lone surrogate (surrogateescape): U+DC80 + byte."""
    from ..inference.inputs import lone_surrogate  # not at the top: the package imports torch

    at = lone_surrogate(text)
    if at is None:
        return None
    char = ord(text[at])
    return f"byte {char - 0xDC00:#04x}" if 0xDC80 <= char <= 0xDCFF else f"U+{char:04X}"


def section_files(args: list[str], sections: tuple[str, ...]) -> tuple[list[str], dict[str, str]]:
    """(``args`` without ``--SECTION FILE``, {section: FILE}): the files are read by ``parse``,
    not by jsonargparse, so that they get the checks ``--config`` gets."""
    rest: list[str] = []
    files: dict[str, str] = {}
    while args:
        arg, args = args[0], args[1:]
        name, eq, value = arg[2:].partition("=") if arg.startswith("--") else ("", "", "")
        if name not in sections or not (eq or args):
            rest.append(arg)
            continue
        if not eq:
            value, args = args[0], args[1:]
        files[name] = value
    return rest, files


def section_file_help(section: str) -> str:
    """The help of ``--SECTION FILE``."""
    return (f"a YAML file of {section} keys (key: value), checked as --config is; the "
            f"--{section}.KEY options go on top")  # fmt: skip


def option_names(parser: ArgumentParser) -> list[str]:
    """Every long option ``parser`` takes: ``--out``, ``--train.max_steps``, ..."""
    return [name for action in parser._actions for name in action.option_strings
            if name.startswith("--")]  # fmt: skip


def unknown_option(args: list[str], parser: ArgumentParser) -> str | None:
    """The message for the first option in ``args`` that ``parser`` does not take, with the
    closest one it does take; None if it takes them all."""
    known = option_names(parser)
    for arg in args:
        if arg == "--":
            return None
        given = arg.partition("=")[0]
        if not arg.startswith("--") or given in known:
            continue
        section, _, key = given[2:].partition(".")
        cls = COMMAND_SECTIONS.get(section)
        if cls is not None and key in {f.name for f in fields(cls)}:  # commands.py's skip
            return f"this command has no use for {given}: leave it out (see --help)"
        by_name = {option.rpartition(".")[2].lstrip("-"): option for option in known}
        name = given.rpartition(".")[2].lstrip("-").replace("-", "_")  # the key's own name
        close = difflib.get_close_matches(name, by_name, n=1)
        suggestion = by_name[close[0]] if close else next(
            iter(difflib.get_close_matches(given, known, n=1)), None)  # fmt: skip
        hint = f"; did you mean {suggestion}?" if suggestion else ""
        return f"unknown option {given}{hint} (see --help)"
    return None


def one_line(message: str, options: list[str] | tuple[str, ...] = ()) -> str:
    """A jsonargparse message on one line; a value of the wrong type says what was expected,
    and missing arguments are named as ``--help`` names them (``--ref``, ``MODEL_DIR``; argparse
    says ``ref``, ``model_dir``). ``options``: the long options the parser takes."""
    text = " ".join(message.split())
    missing = re.fullmatch(r"the following arguments are required: (.+)", text)
    if missing:
        names = [f"--{n}" if f"--{n}" in options else n.upper()
                 for n in missing.group(1).split(", ")]  # fmt: skip
        text = f"the following arguments are required: {', '.join(names)}"
    # jsonargparse's message is the only place that names the key and the value it refused.
    wrong_type = re.match(
        r'Parser key "(.+?)": Expected a <class \'(\w+)\'>\. Got value:\s?(.*)', text
    )
    if wrong_type:
        key, expected, value = wrong_type.groups()
        finite = expected == "float" and value.strip().lower().lstrip("+-") in ("nan", "inf")
        text = f"--{key} must be {'a finite number' if finite else expected}, got {value!r}"
    return f"{text} (see --help)"


# ------------------------------------------------------- options several commands share
def runtime_of(given: dict[str, dict]) -> RuntimeConfig:
    """The runtime options given on the command line (not those a checkpoint was trained with)."""
    return RuntimeConfig(**given.get("runtime", {}))


def model_options(p: ArgumentParser) -> None:
    p.add_argument("model_dir", help="model directory (or one of its checkpoint folders)")
    checkpoint_option(p)


def checkpoint_option(p: ArgumentParser, of: str = "a model directory") -> None:
    """``--checkpoint best|last`` (not given: None, which ``parse`` makes best)."""
    p.add_argument("--checkpoint", choices=WHICH,
                   help=f"which checkpoint of {of} (default: best)")  # fmt: skip


def checkpoint_choice(which: str | None, folders: list[str]) -> str | None:
    """``--checkpoint``, None (a model directory's best) when not given. Given with a folder
    that is one checkpoint already, or an export, it would be ignored: refused, naming the
    folder."""
    if which is None:
        return None
    label = f"--checkpoint {which}"
    if not folders:
        raise UserError(ignored_choice(label, "none", "given", "--checkpoint"))
    for folder in folders:
        kind = "an export" if folder_kind(folder) == "export" else (
            "one checkpoint already" if is_checkpoint_folder(Path(folder)) else None)  # fmt: skip
        if kind:
            raise UserError(ignored_choice(label, folder, kind, "--checkpoint"))
    return which


def engine_options(p: ArgumentParser) -> None:
    p.add_argument("--engine", default="torch", choices=["torch", "ctranslate2"],
                   help="torch: our decoder; ctranslate2: CTranslate2 on an exported model (a "
                   "model directory is converted on the fly); pip install '.[ct2]'")  # fmt: skip
