"""What the write gate puts aside, and how a later run finishes what a killed one left.

Every temporary the gate makes is named ``.NAME.transformer-WHAT-PID`` beside NAME: ``tmp`` (the
new content, before it is renamed to NAME), ``old`` (NAME's earlier content, moved aside while
a folder is swapped), ``trash`` (being deleted). A process killed with SIGKILL cleans nothing;
the next write of NAME (``files.atomic_write``, ``files.built_aside``) or the next start of a
run (``RunDir.recover``) calls ``clean_leftovers``, which removes a ``tmp`` or ``trash``, puts an
``old`` back if NAME is missing (else removes it), and says so in a warning line each.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
from contextlib import suppress
from pathlib import Path

TEMPORARY = re.compile(r"\.(?P<name>.+)\.transformer-(?P<what>tmp|old|trash)-(?P<pid>\d+)")


def temporary(path: Path, what: str) -> Path:
    """The hidden name beside ``path`` of this process's ``what``: tmp, old or trash."""
    return path.with_name(f".{path.name}.transformer-{what}-{os.getpid()}")


def clean_leftovers(folder: Path, name: str | None = None) -> list[str]:
    """Finishes what interrupted writes of ``name`` (None: of any name) left in ``folder``, and
    says what it did, a line each: a ``tmp`` or ``trash`` is removed; an ``old`` is put back
    if ``name`` is missing, else removed. What a running process is writing is left alone, and
    said (``transformer average`` may be saving into a run whose training prunes)."""
    said: list[str] = []
    pattern = f".{glob.escape(name)}.transformer-*" if name else ".*.transformer-*"
    for leftover in sorted(Path(folder).glob(pattern)):
        found = TEMPORARY.fullmatch(leftover.name)
        if found is None or (name is not None and found["name"] != name):
            continue
        pid, target = int(found["pid"]), leftover.with_name(found["name"])
        if _running(pid):
            said.append(f"{leftover} is being written by process {pid}; left as it is")
        elif found["what"] == "old" and not target.exists() and not target.is_symlink():
            os.rename(leftover, target)
            said.append(f"put {target} back from {leftover.name}, where an interrupted "
                        f"replacement (process {pid}) had moved it")  # fmt: skip
        else:
            delete(leftover)
            said.append(f"removed {leftover}, left by an interrupted write (process {pid})")
    return said


def _running(pid: int) -> bool:
    """Whether process ``pid`` may still be writing (this process is not: it is about to)."""
    if pid <= 0 or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def delete(path: Path) -> None:
    """Removes a temporary (a folder or a file); one already gone is fine."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with suppress(FileNotFoundError):
            path.unlink()


def fsync_dir(path: Path) -> None:
    """Flushes a folder's entries (a rename inside it) to disk."""
    _fsync(path)


def fsync_tree(folder: Path) -> None:
    """Flushes every file below ``folder`` to disk (before a rename makes them visible)."""
    for path in folder.rglob("*"):
        if path.is_file():
            _fsync(path)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
