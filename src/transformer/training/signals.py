"""Ctrl-C and SIGTERM during training: finish the step, save, then stop with a message."""

from __future__ import annotations

import signal
import sys
import threading

from ..errors import Terminated


class StopRequests:
    """SIGINT (Ctrl-C) and SIGTERM while training: the current step finishes, a checkpoint is
    saved and training stops with exit code 128 + signal. A second signal stops at once (the
    last saved checkpoint stays intact). Outside the main thread nothing is installed."""

    def __init__(self) -> None:
        self.signum = 0
        self._previous: dict[int, object] = {}

    @property
    def requested(self) -> bool:
        return self.signum != 0

    @property
    def name(self) -> str:
        names = {signal.SIGINT: "interrupted (Ctrl-C)", signal.SIGTERM: "terminated (SIGTERM)"}
        return names.get(self.signum, "stopped (another process of the run was signalled)")

    def _handle(self, signum: int, frame: object) -> None:
        if self.requested:
            raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()
        self.signum = signum
        if sys.stderr.isatty():  # a person pressed Ctrl-C: say that something is happening
            print("\nstopping after this step to save a checkpoint (again to stop at once)",
                  file=sys.stderr)  # fmt: skip

    def __enter__(self) -> StopRequests:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
