"""The write gate: every byte a command writes goes through here, so that nothing a user has is
ever lost or left half-written (tests/test_structure.py fails on a write anywhere else).

One rule, checked before anything is read (``check_output`` for a file or a folder of files,
``check_replaceable`` for a folder a command makes or replaces whole) and again when writing:

- what is there already must be a regular file (a folder, for a folder): never a device, a FIFO,
  a socket; a link to a regular file is written through, so the link stays a link;
- it is not one of the command's inputs, nor inside a folder the command reads, nor inside any
  project folder (a run, an export, an import, a report or a checkpoint: ``model_dir/layout.py``),
  unless the write names that folder as its ``owner``: only the command that made a project
  folder writes into it;
- a folder is replaced whole only if it is of the command's kind and its marker lists every
  entry in it: a file of the user's in an earlier export, import or report is named, not lost;
- ``--force`` and ``--overwrite`` relax only "it exists", never the rest.

How it writes. A file goes to a hidden temporary beside it, is flushed to disk and renamed over
its destination (``os.replace`` is atomic on POSIX): a crash, a full disk or Ctrl-C leaves the
old file or the new one, never a mix. A folder is built beside its destination and swapped in
the same way (``built_aside``). What a killed process left aside is recognised and finished by
the next write of the same name (``temporaries.py``).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import stat
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from .errors import UserError
from .model_dir.layout import (
    KINDS,
    WHOLE,
    describe_folder,
    kind_of,
    made_entries,
    marker_name,
    project_folder_of,
)
from .temporaries import clean_leftovers, delete, fsync_dir, fsync_tree, temporary

STDOUT = "-"

log = logging.getLogger(__name__)


# -------------------------------------------------------------------------------- the rule
def check_output(
    output: str | Path | None,
    flag: str,
    reads: Mapping[str, str | Path | None],
    folder: bool = False,
    new_only: str | None = None,
) -> Path | None:
    """Where a command may write ``output``; refused in one line naming ``flag`` otherwise.

    Call it before anything is read. The rule is the module's docstring.

    Args:
        output: the path given; None or ``-`` for standard output (returns None).
        flag: the option, for messages ("--output").
        reads: {option: path} of every file and folder the command reads (None entries skipped).
        folder: the output is a folder the command writes files into (missing, or a folder).
        new_only: an existing file is refused, naming this option as the way to replace it
            ("--force"); checked last, so that it is never suggested where it would not help.
    Returns:
        the path to write: ``output``, or the file a link to a regular file points to.
    """
    if output is None or str(output) == STDOUT:
        return None
    given, what = Path(output), f"{flag} {output}"
    if not folder and str(output).endswith(("/", os.sep)):  # Path() would drop the slash
        raise UserError(f"{what} names a folder (it ends with '/'); choose a file")
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
    _check_reads(target, what, reads)
    inside = project_folder_of(target / "x" if folder else target)
    if inside is not None:
        raise UserError(f"{what} lies inside {describe_folder(*inside)}, whose files only the "
                        f"command that made it writes: choose {flag} outside it")  # fmt: skip
    if not folder and not target.parent.is_dir():
        raise UserError(f"{what}: the folder {target.parent} does not exist")
    _check_writable(target if folder and mode is not None else target.parent, what)
    if new_only and (mode is not None or given.is_symlink()):
        raise UserError(f"{what} exists; choose another file or add {new_only} to replace it")
    return target


def check_replaceable(
    path: str | Path,
    kind: str,
    flag: str = "--out",
    reads: Mapping[str, str | Path | None] | None = None,
) -> None:
    """Refuses (one line naming ``flag``) to make or replace a folder of ``kind`` at ``path``.

    Refused: ``path`` is an input or lies inside one (``reads``) or inside another project
    folder; it is not a folder; it is a project folder of another kind (or a checkpoint). For
    the kinds replaced whole (export, import, report), a folder that is not empty must be an
    earlier one of ``kind`` holding only the entries its marker lists; what an interrupted
    replacement left beside it is finished first. A run's own entries are its owner's business
    (``RunDir``).
    """
    path = Path(path)
    _warn(clean_leftovers(path.parent, path.name))
    what = f"{flag} {path}"
    _check_reads(Path(os.path.realpath(path)), what, reads or {})
    inside = project_folder_of(path)
    if inside is not None:
        raise UserError(f"{what} lies inside {describe_folder(*inside)}; {_a(kind)} there would "
                        f"damage it: choose {flag} outside it")  # fmt: skip
    if path.exists() and not path.is_dir():
        raise UserError(f"{what} exists and is not a folder: choose another {flag}")
    real = Path(os.path.realpath(path))  # a run is written in; the others are built beside it
    _check_writable(real if kind == "run" and real.is_dir() else real.parent, what)
    found = kind_of(path)
    if found not in (None, kind):
        raise UserError(f"{what} is {describe_folder(path, found)}, not {_a(kind)}; nothing in "
                        f"it is replaced: choose another {flag}")  # fmt: skip
    if kind not in WHOLE or not path.is_dir():
        return
    entries = {p.name for p in path.iterdir()}
    if entries and found is None:
        raise UserError(f"{path} is not empty and holds no earlier {kind} ({marker_name(kind)}); "
                        f"nothing in it is replaced: choose a new or empty {flag}")  # fmt: skip
    foreign = sorted(entries - made_entries(path, kind))
    if foreign:
        raise UserError(f"{path} holds {', '.join(foreign)}, which the earlier {kind} did not "
                        f"make; nothing in it is replaced: move them out of it, or choose "
                        f"another {flag}")  # fmt: skip


def _check_writable(folder: Path, what: str) -> None:
    """Refuses a folder the command could not write in, before the work rather than after."""
    if folder.is_dir() and not os.access(folder, os.W_OK):
        raise UserError(f"{what}: the folder {folder} is not writable (a read-only file system, "
                        "or its permissions): choose another")  # fmt: skip


def _check_reads(target: Path, what: str, reads: Mapping[str, str | Path | None]) -> None:
    for name, path in reads.items():
        if path is not None:
            _check_not_in(target, what, name, Path(path))


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


def check_write(path: Path, owner: Path | None) -> None:
    """The rule at the moment of writing: a write that names no ``owner`` lands in no project
    folder (whatever its caller checked before); one that does lands inside its owner."""
    if owner is None:
        inside = project_folder_of(path)
        if inside is not None:
            raise UserError(
                f"{path} lies inside {describe_folder(*inside)}, whose files only "
                "the command that made it writes: nothing is written there"
            )
        return
    real, own = Path(os.path.realpath(path)), Path(os.path.realpath(owner))
    if real != own and own not in real.parents:
        raise ValueError(f"{path} lies outside {owner}, the folder it was to be written in")


def _a(kind: str) -> str:
    return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"


def _file_type(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"),
             (stat.S_ISSOCK, "a socket"), (stat.S_ISREG, "a regular file"))  # fmt: skip
    return next((name for test, name in kinds if test(mode)), "a special file")


# ---------------------------------------------------------------------------------- files
@contextmanager
def atomic_write(path: str | Path, mode: str = "w", owner: Path | None = None) -> Iterator[IO]:
    """Opens a temporary file beside ``path``; on success it replaces ``path`` atomically.

    A link is written through (its target is replaced); anything but a regular file or a new
    name is refused. On any exception (including KeyboardInterrupt) the temporary file is
    removed and ``path`` keeps its old content, if it had one; an error of the file system
    while writing (no space left, a read-only one) names ``path``, not the temporary file.

    Args:
        path: the destination.
        mode: "w" (UTF-8 text) or "wb".
        owner: the project folder the command writes in (its own run, the folder it builds);
            None for a path of the user's, which may then lie in no project folder.
    """
    path = Path(os.path.realpath(path))  # a link to a file stays a link: its target is replaced
    if path.exists() and not path.is_file():
        raise UserError(f"{path} is {_file_type(path.stat().st_mode)}; it is not replaced")
    check_write(path, owner)
    _warn(clean_leftovers(path.parent, path.name))
    part = temporary(path, "tmp")
    binary = "b" in mode
    try:
        with open(part, "xb" if binary else "x", encoding=None if binary else "utf-8") as f:
            if path.exists():  # keep the permissions of the file it replaces
                os.fchmod(f.fileno(), stat.S_IMODE(path.stat().st_mode))
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(part, path)
    except OSError as error:
        if error.filename is not None and str(error.filename) != str(part):
            raise  # another file's: an input read inside the block
        raise OSError(error.errno, error.strerror, str(path)) from None  # the file meant
    finally:
        part.unlink(missing_ok=True)
    fsync_dir(path.parent)


def write_bytes(path: str | Path, data: bytes, owner: Path | None = None) -> None:
    """Writes ``data`` to ``path`` through ``atomic_write``."""
    with atomic_write(path, "wb", owner) as f:
        f.write(data)


def write_text(path: str | Path, text: str, owner: Path | None = None) -> None:
    """Writes UTF-8 ``text`` to ``path`` through ``atomic_write``."""
    with atomic_write(path, "w", owner) as f:
        f.write(text)


def write_json_atomic(path: Path, value: object, owner: Path | None = None) -> None:
    """Writes JSON to ``path`` through ``atomic_write`` (never half-written)."""
    with atomic_write(path, "w", owner) as f:
        json.dump(value, f, indent=2)


def open_log(path: Path, owner: Path, fresh: bool = False) -> IO[str]:
    """A log file of the project folder ``owner``, opened to append lines (``fresh``: emptied
    first). A log grows line by line, so it is not atomic: a crash keeps the lines written."""
    if path.exists() and not path.is_file():
        raise UserError(f"{path} is {_file_type(path.stat().st_mode)}; no log is written there")
    check_write(path, owner)
    return open(path, "w" if fresh else "a", encoding="utf-8")  # noqa: SIM115 (the caller closes)


def mark_folder(path: str | Path, kind: str, **info: object) -> Path:
    """Writes the marker that makes ``path`` a project folder of ``kind`` (atomically).

    For a kind replaced whole (export, import, report) the marker lists every entry in ``path``
    as ``files``: write it last. A run's marker is written first (``model_dir/runs.py``).

    Args:
        kind: run, export, import or report.
        info: JSON-able facts stored with it, e.g. ``format``, ``source``.
    Returns the marker file.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown folder kind {kind!r}; choose from {KINDS}")
    path = Path(path)
    marker = path / marker_name(kind)
    if kind in WHOLE:
        info["files"] = sorted({p.name for p in path.iterdir()} | {marker.name})
    write_json_atomic(marker, {"kind": kind, **info}, owner=path)
    return marker


# -------------------------------------------------------------------------------- folders
@contextmanager
def built_aside(out: Path, owner: Path | None = None) -> Iterator[Path]:
    """A new hidden folder beside ``out`` to build it in; when the block ends without an error,
    its files are flushed to disk and it is renamed to ``out``.

    An earlier ``out`` (the caller has checked that it may be replaced) is moved aside first
    and deleted after the rename, so an interruption leaves the old folder or the new one (at
    worst the old one under ``.OUT.transformer-old-PID``, which the next write puts back), never
    half of one. On an error the new folder is removed and ``out`` is untouched.

    Args:
        out: the folder to create or replace.
        owner: the project folder it lies in (a checkpoint in its run), or None.
    """
    out = Path(out)
    check_write(out, owner)
    _warn(clean_leftovers(out.parent, out.name))
    out.parent.mkdir(parents=True, exist_ok=True)
    staging, aside = temporary(out, "tmp"), temporary(out, "old")
    staging.mkdir()
    try:
        yield staging
        fsync_tree(staging)  # on disk before the rename makes it visible
        if out.exists() and any(out.iterdir()):
            os.rename(out, aside)
        os.replace(staging, out)  # onto a missing name or an empty folder
        fsync_dir(out.parent)
    finally:
        if aside.exists() and not out.exists():  # interrupted between the two renames
            os.rename(aside, out)
        delete(staging)
        delete(aside)


@contextmanager
def replace_folder(
    out: Path,
    kind: str,
    flag: str,
    reads: Mapping[str, str | Path | None],
) -> Iterator[Path]:
    """Makes or replaces the folder ``out`` of ``kind`` (export, import, report) whole: the rule
    is checked again (``check_replaceable``: hours may have passed since the command checked
    it), the folder is built aside (``built_aside``), and the block must end with
    ``mark_folder``, whose marker lists every entry."""
    check_replaceable(out, kind, flag, reads)
    with built_aside(Path(out)) as staging:
        yield staging
        unlisted = {p.name for p in staging.iterdir()} - made_entries(staging, kind)
        if unlisted:
            raise RuntimeError(f"{out}: the {kind} was built without a marker listing "
                               f"{sorted(unlisted)}")  # fmt: skip


def remove_tree(path: Path, owner: Path) -> None:
    """Deletes a folder (or a file) of the project folder ``owner``, so that an interruption
    leaves nothing half-deleted under its name: it is renamed to ``.NAME.transformer-trash-PID``
    first (which the next write of NAME removes), then removed. A missing ``path`` is fine."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return
    check_write(path, owner)
    trash = temporary(path, "trash")
    delete(trash)
    os.rename(path, trash)
    delete(trash)


def move(source: Path, destination: Path, owner: Path) -> None:
    """Renames ``source`` to ``destination`` (a missing name, or an empty folder), both in the
    project folder ``owner``: atomic, within one file system."""
    check_write(source, owner)
    check_write(destination, owner)
    os.rename(source, destination)


def link_tree(source: Path, destination: Path, owner: Path) -> None:
    """Makes the new folder ``destination`` (in the project folder ``owner``) hold hard links
    to the files of the folder ``source``: the same files, not copies (a copy where the file
    system cannot link), so that removing either folder later leaves the other whole."""
    check_write(destination, owner)
    destination.mkdir(parents=True)
    for path in sorted(source.iterdir()):
        if path.is_dir():
            link_tree(path, destination / path.name, owner)
            continue
        try:
            os.link(path, destination / path.name)
        except OSError:  # a file system without hard links
            shutil.copy2(path, destination / path.name)


def _warn(lines: list[str]) -> None:
    for line in lines:
        log.warning(line)
