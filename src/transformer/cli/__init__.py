"""The command line: ``transformer COMMAND [options]``.

``entry.py`` parses and runs a command and turns a ``UserError`` into one line on stderr;
``commands.py`` is the table of commands, whose runs live in ``training.py`` and
``translating.py``; ``options.py`` derives the options from the typed config. A command parses
and prints; what it does is the library's (an engine over files: ``inference/jobs.py``).
"""

from .entry import build_parser, config_from_args, main

__all__ = ["build_parser", "config_from_args", "main"]
