"""Writing files so that nothing a user has is ever lost or left half-written.

Every file the tools write goes to a temporary file in the same folder, is flushed to disk and
then renamed over its destination (``os.replace`` is atomic on POSIX): a crash, a full disk or
Ctrl-C leaves either the old file or the new one, never a mix. An output path that is also an
input of the same command is refused before anything is read or written.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from .errors import UserError


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


def describe_os_error(error: OSError, what: str = "") -> str:
    """One line for an OSError, e.g. "no space left on device while saving checkpoint ...".

    Args:
        what: what was being done ("saving checkpoint step_9 in DIR"); "" names the file only.
    """
    if error.errno == errno.ENOSPC:
        where = what or (f"writing {error.filename}" if error.filename else "writing")
        return f"no space left on device while {where}"
    reason = error.strerror or str(error)
    if what:
        return f"{what} failed: {reason}" + (f" ({error.filename})" if error.filename else "")
    return f"{error.filename}: {reason}" if error.filename else reason


@contextmanager
def atomic_write(path: str | Path, mode: str = "w") -> Iterator[IO]:
    """Opens a temporary file beside ``path``; on success it replaces ``path`` atomically.

    On any exception (including KeyboardInterrupt) the temporary file is removed and ``path``
    keeps its old content, if it had one.

    Args:
        path: the destination.
        mode: "w" (UTF-8 text) or "wb".
    """
    path = Path(path)
    fd, part = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    os.fchmod(fd, _mode_for(path))  # mkstemp makes 0600 files; give the usual permissions
    try:
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(part, path)
    finally:
        Path(part).unlink(missing_ok=True)
    fsync_dir(path.parent)


def _mode_for(path: Path) -> int:
    """The permissions of the file being replaced, else those a new file would get."""
    try:
        return path.stat().st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def write_json_atomic(path: Path, value: object) -> None:
    """Writes JSON to ``path`` via a temporary file and ``os.replace`` (never half-written)."""
    with atomic_write(path) as f:
        json.dump(value, f, indent=2)


def check_not_an_input(output: str | Path, inputs: dict[str, str | Path | None], flag: str) -> None:
    """Refuses an output path that is (or links to) one of the command's input files.

    Args:
        output: where the command would write.
        inputs: {flag: path} of the files it reads (None entries are skipped).
        flag: the output's option name, for the message.
    """
    out = Path(output)
    for name, given in inputs.items():
        if given is None:
            continue
        path = Path(given)
        same = out.resolve() == path.resolve()
        if not same and out.exists() and path.exists():
            same = os.path.samefile(out, path)
        if same:
            raise UserError(
                f"{flag} {output} is the same file as {name} {given}: writing it would destroy "
                f"the input; choose another {flag}"
            )


def remove_tree(path: Path) -> None:
    """Deletes a folder so that an interruption leaves no half-deleted folder under its name:
    it is renamed to a hidden ``.trash-`` sibling first, then removed."""
    trash = path.with_name(f".trash-{path.name}")
    shutil.rmtree(trash, ignore_errors=True)
    os.rename(path, trash)
    shutil.rmtree(trash, ignore_errors=True)


@contextmanager
def built_aside(out: Path, what: str) -> Iterator[Path]:
    """A new hidden folder beside ``out`` to build it in; when the block ends without an error,
    its files are flushed to disk and it is renamed to ``out``.

    An earlier ``out`` (the caller has checked that it may be replaced) is moved aside first
    and deleted after the rename, so an interruption leaves the old folder or the new one (in
    the worst case under ``.OUT.replaced-*``), never half of one. On an error the new folder
    is removed and ``out`` is untouched.

    Args:
        out: the folder to create or replace.
        what: a word for the hidden folder's name (``.OUT.WHAT-*``), e.g. "export".
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.{what}-"))
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(staging, 0o777 & ~umask)  # mkdtemp makes it private; give the usual mode
        yield staging
        fsync_tree(staging)  # on disk before the rename makes it visible
        if out.exists() and any(out.iterdir()):
            aside = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.replaced-"))
            os.replace(out, aside / out.name)
            os.replace(staging, out)
            fsync_dir(out.parent)
            remove_tree(aside)
        else:
            os.replace(staging, out)  # onto a missing name or an empty folder
            fsync_dir(out.parent)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
