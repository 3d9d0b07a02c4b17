"""The command line: ``transformer COMMAND [options]``.

``main.py`` parses and runs a command and turns a ``UserError`` into one line on stderr;
``commands.py`` is the table of commands, whose runs live in ``training.py`` and
``translating.py``; ``options.py`` derives the options from the typed config; ``jobs.py`` runs
an engine over files (translate, evaluate).
"""

from .main import build_parser, config_from_args, main

__all__ = ["build_parser", "config_from_args", "main"]
