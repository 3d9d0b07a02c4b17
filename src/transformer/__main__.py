"""``python -m transformer``, ``torchrun -m transformer`` and the ``transformer`` command."""

import gc
import sys


def run() -> int:
    """Imports the command line (and torch, unless only the help is asked for) with Python's
    cycle collector paused, then runs it.

    Importing torch and the commands makes some 400,000 objects, and the collector walked them
    all three times as they were made: 150-200 ms of each command's start. Frozen once imported
    (``gc.freeze``), they live as long as the process and are left out of every later
    collection. Only the command does this: a program that imports the library keeps its own
    collector's settings. Ctrl-C during the imports ends it as Ctrl-C during a command does
    (``cli/entry.py``): one line and exit code 130."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        from .cli import main
        from .cli.entry import only_help

        if not only_help(sys.argv[1:]):
            # torch, the model and the engines: most of a command's start-up
            from . import inference  # noqa: F401
    except KeyboardInterrupt:  # Ctrl-C in the second the imports take: nothing has run yet
        print("transformer: interrupted", file=sys.stderr)
        return 130
    finally:
        gc.freeze()
        if collecting:
            gc.enable()
    return main()


if __name__ == "__main__":
    sys.exit(run())
