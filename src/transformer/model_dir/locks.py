"""The lock of a training run: an flock on ``OUT/.lock`` that a second training into OUT finds
held (runs.py). Part of the write gate (files.py): the lock file is written through its rule,
named by its owner.
"""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..files import check_write


class Busy(Exception):
    """The lock is held by another process, whose id it holds (``holder``)."""

    def __init__(self, holder: str) -> None:
        super().__init__(holder)
        self.holder = holder


@contextmanager
def exclusive_lock(path: Path, owner: Path) -> Iterator[None]:
    """Holds an flock on ``path`` (made if missing, then holding this process's id) for the
    block. The kernel releases it however the process ends, so a killed process leaves nothing
    locked. Raises ``Busy`` when another process holds it."""
    check_write(path, owner)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            if error.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            raise Busy(os.read(fd, 32).decode(errors="replace").strip() or "?") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        os.close(fd)
