"""Writing files so that nothing a user has is ever lost or left half-written.

One rule for every path a command writes, checked before anything is read (``check_output``; a
folder of a kind, a run or an export, goes through ``model_dir.check_replaceable`` too):

- what is there already must be a regular file (a folder, for a folder of figures): never a
  device, a FIFO, a socket or a folder; a link to a regular file is written through, so the link
  stays a link. ``-`` (or no output at all) is standard output;
- it is not one of the command's inputs, and lies neither inside a model directory or export the
  command reads nor inside any project folder: a run, an export, an import (each says what it
  is with a marker file, ``transformer-KIND.json``, which ``model_dir.mark_folder`` writes) or a
  checkpoint folder. Only the command that made such a folder writes into it.

Every file the tools write goes to a temporary file in the same folder, is flushed to disk and
then renamed over its destination (``os.replace`` is atomic on POSIX): a crash, a full disk or
Ctrl-C leaves either the old file or the new one, never a mix.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from .errors import UserError

KINDS = ("run", "export", "import")  # the project folders that carry a marker
STDOUT = "-"


def marker_name(kind: str) -> str:
    """The marker file of a project folder of ``kind``: ``transformer-run.json``, ..."""
    return f"transformer-{kind}.json"


def folder_kind(path: str | Path) -> str | None:
    """What project folder ``path`` is: "run", "export" or "import" (its marker), else None.

    A run made before markers existed is recognised by its layout: ``config.json`` beside
    ``checkpoints/`` or ``tokenizer/`` (an export, which has both too, has always had a marker).
    """
    path = Path(path)
    if not path.is_dir():
        return None
    for kind in KINDS:
        if (path / marker_name(kind)).is_file():
            return kind
    if (path / "config.json").is_file() and any((path / d).is_dir() for d in _RUN_FOLDERS):
        return "run"
    return None


_RUN_FOLDERS = ("checkpoints", "tokenizer")


def is_checkpoint_folder(path: Path) -> bool:
    """A checkpoint (``model.safetensors`` and ``config.json``), inside a run or copied alone."""
    return (path / "model.safetensors").is_file() and (path / "config.json").is_file()


def project_folder_of(path: str | Path) -> tuple[Path, str] | None:
    """The nearest folder above ``path`` (links resolved) that a command of this project made:
    (folder, kind), the kind being run, export, import or checkpoint; None if there is none."""
    for folder in Path(os.path.realpath(path)).parents:
        kind = folder_kind(folder) or ("checkpoint" if is_checkpoint_folder(folder) else None)
        if kind is not None:
            return folder, kind
    return None


def describe_folder(folder: Path, kind: str) -> str:
    """The folder as messages name it: the run /a/b (transformer-run.json), ..."""
    marker = folder / marker_name(kind)
    return f"the {kind} {folder}" + (f" ({marker.name})" if marker.is_file() else "")


def check_output(
    output: str | Path | None,
    flag: str,
    reads: Mapping[str, str | Path | None],
    folder: bool = False,
) -> Path | None:
    """Where a command may write ``output``; refused in one line naming ``flag`` otherwise.

    Call it before anything is read. The rule is the module's docstring.

    Args:
        output: the path given; None or ``-`` for standard output (returns None).
        flag: the option, for messages ("--output").
        reads: {option: path} of every file and folder the command reads (None entries skipped).
        folder: the output is a folder the command writes files into (missing, or a folder).
    Returns:
        the path to write: ``output``, or the file a link to a regular file points to.
    """
    if output is None or str(output) == STDOUT:
        return None
    given, what = Path(output), f"{flag} {output}"
    try:
        mode = os.stat(given).st_mode  # through links: /dev/stdout is the FIFO or terminal behind
    except FileNotFoundError:
        mode = None
    except OSError as error:
        raise UserError(f"{what}: {error.strerror}") from None
    wanted, kind = (stat.S_ISDIR, "a folder") if folder else (stat.S_ISREG, "a regular file")
    if mode is not None and not wanted(mode):
        raise UserError(f"{what} is {_file_type(mode)}, not {kind}; nothing is written there: "
                        f"choose {'a folder' if folder else 'a file'}")  # fmt: skip
    target = Path(os.path.realpath(given))
    for name, path in reads.items():
        if path is not None:
            _check_not_in(target, what, name, Path(path))
    inside = project_folder_of(target / "x" if folder else target)
    if inside is not None:
        raise UserError(f"{what} lies inside {describe_folder(*inside)}, whose files only the "
                        f"command that made it writes: choose {flag} outside it")  # fmt: skip
    if not folder and not target.parent.is_dir():
        raise UserError(f"{what}: the folder {target.parent} does not exist")
    return target


def _check_not_in(target: Path, what: str, name: str, path: Path) -> None:
    """Refuses ``target`` if it is the input ``path``, or lies inside it (a folder read)."""
    source = Path(os.path.realpath(path))
    if target == source or (target.exists() and path.exists() and os.path.samefile(target, path)):
        flag = what.split()[0]
        noun = "folder" if source.is_dir() else "file"
        raise UserError(f"{what} is the same {noun} as {name} {path}: writing it would destroy "
                        f"the input; choose another {flag}")  # fmt: skip
    if source.is_dir() and source in target.parents:
        raise UserError(f"{what} lies inside {name} {path}, which this command reads: choose "
                        f"{what.split()[0]} outside it")  # fmt: skip


def _file_type(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"),
             (stat.S_ISSOCK, "a socket"), (stat.S_ISREG, "a regular file"))  # fmt: skip
    return next((name for test, name in kinds if test(mode)), "a special file")


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

    A link is written through (its target is replaced); anything but a regular file or a new
    name is refused.

    On any exception (including KeyboardInterrupt) the temporary file is removed and ``path``
    keeps its old content, if it had one.

    Args:
        path: the destination.
        mode: "w" (UTF-8 text) or "wb".
    """
    path = Path(os.path.realpath(path))  # a link to a file stays a link: its target is replaced
    if path.exists() and not path.is_file():
        raise UserError(f"{path} is {_file_type(path.stat().st_mode)}; it is not replaced")
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
