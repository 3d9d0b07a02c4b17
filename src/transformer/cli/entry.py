"""The command line: each subcommand parses its arguments and makes one call into the library.

Options are derived from the typed config by jsonargparse, which reads the dataclasses, their
types and the docstring under each field: every key is in ``--help`` with its type, default and
help, and the names are those of the YAML files (``--train.max_steps 20`` on the command line is
``train: {max_steps: 20}`` in a file). A key that is unique across sections may drop its section
(``--max_steps``), ``-`` may stand for ``_`` (``--max-steps``), and a true/false option given
alone means true.

Only ``UserError`` (and the OSError of a full disk or a missing permission) ends in a one-line
message and exit code 2 (130 / 143 for Ctrl-C / SIGTERM); anything else is a bug and shows its
traceback. ``TRANSFORMER_DEBUG=1`` shows the traceback of a UserError too.
"""

from __future__ import annotations

import difflib
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from contextlib import contextmanager

from jsonargparse import ArgumentParser, set_parsing_settings

from ..config import RunConfig
from ..errors import Terminated, UserError, describe_os_error
from .commands import COMMANDS
from .help import command_help
from .options import COMMAND_SECTIONS, parse, section_file_help
from .training import run_config

set_parsing_settings(docstring_parse_attribute_docstrings=True)


# ------------------------------------------------------------------------------- parsing
def build_parser(name: str) -> ArgumentParser:
    """The parser of one command: its own options, then its config sections' keys."""
    command = COMMANDS[name]
    parser = ArgumentParser(prog=f"transformer {name}", description=command.description or
                            command.help, exit_on_error=False, allow_abbrev=False)  # fmt: skip
    command.options(parser)
    for section in command.sections:
        skip = {key.partition(".")[2] for key in command.skip if key.startswith(f"{section}.")}
        parser.add_class_arguments(
            COMMAND_SECTIONS[section], section, sub_configs=False, instantiate=False, skip=skip
        )
    for action in parser._actions:  # --SECTION FILE: read by options.parse, not jsonargparse
        if action.dest in command.sections and action.option_strings == [f"--{action.dest}"]:
            action.help, action.metavar = section_file_help(action.dest), "FILE"
    return parser


def _usage() -> str:
    lines = ["usage: transformer COMMAND [options]   (transformer COMMAND --help for more)", ""]
    lines += [f"  {name:<10} {command.help}" for name, command in COMMANDS.items()]
    return "\n".join(lines)


def only_help(args: Sequence[str]) -> bool:
    """Whether ``transformer ARGS`` only prints the usage, a command's help, or an unknown
    command's error: all that ``main`` answers without torch."""
    return (
        not args
        or args[0] in ("-h", "--help")
        or args[0] not in COMMANDS
        or any(arg in ("-h", "--help") for arg in args[1:])
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(_usage())
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        close = difflib.get_close_matches(name, COMMANDS, n=1)
        hint = f"; did you mean {close[0]}?" if close else f"; choose from {', '.join(COMMANDS)}"
        print(f"transformer: error: unknown command {name!r}{hint}", file=sys.stderr)
        return 2
    prefix = f"transformer {name}{_rank()}"
    with _warnings_to_stderr(prefix), _sigterm_raises():
        try:
            if "-h" in rest or "--help" in rest:
                command = COMMANDS[name]
                print(command_help(name, build_parser(name), command.description or command.help,
                                   command.sections))  # fmt: skip
                return 0
            # torch is imported from here on (``__main__.run`` imports it before, with Python's
            # cycle collector paused), not for the usage and the help (0.1-0.2 s, not 1 s)
            from ..model.products import check_cache_sizes, chosen_library

            chosen_library()  # a bad TRANSFORMER_CPU_PRODUCTS is refused before anything runs
            check_cache_sizes()  # and a cache size that would crash oneDNN's first product
            ns, given = parse(build_parser(name), rest, COMMANDS[name].sections)
            COMMANDS[name].run(ns, given)
        except BrokenPipeError:  # the reader went away (`... | head -1`): stop quietly
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 141
        except (UserError, OSError) as error:
            if os.environ.get("TRANSFORMER_DEBUG"):
                raise
            message = error if isinstance(error, UserError) else describe_os_error(error)
            print(f"{prefix}: error: {message}", file=sys.stderr)
            return error.exit_code if isinstance(error, UserError) else 2
        except Terminated:
            print(f"{prefix}: terminated (SIGTERM)", file=sys.stderr)
            return 143
        except KeyboardInterrupt:
            print(f"{prefix}: interrupted", file=sys.stderr)
            return 130
    return 0


def _rank() -> str:
    """`` [rank r of W]`` under torchrun, so that every message says which process wrote it."""
    size = os.environ.get("WORLD_SIZE", "1")
    return f" [rank {os.environ.get('RANK', '?')} of {size}]" if size != "1" else ""


def config_from_args(argv: list[str]) -> RunConfig:
    """The RunConfig that ``transformer train ARGV`` would train (for Python callers, tests)."""
    ns, given = parse(build_parser("train"), argv, COMMANDS["train"].sections)
    return run_config(ns, given)[0]


@contextmanager
def _warnings_to_stderr(prefix: str):
    """The library's warnings (logging) as ``transformer CMD: warning: ...`` lines on stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"{prefix}: warning: %(message)s"))
    handler.setLevel(logging.WARNING)
    logger = logging.getLogger("transformer")
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)


@contextmanager
def _sigterm_raises():
    """SIGTERM raises ``Terminated`` (like Ctrl-C's KeyboardInterrupt), so that temporary files
    are cleaned up and the exit code is 143 with a message, instead of a silent kill."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handle(signum, frame):
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, handle)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
