"""The exceptions that end a command with a message instead of a traceback.

The command line prints their message as a single line and exits with ``exit_code``; the message
must name the file, line or value at fault. Any other exception is a bug and shows as one.
"""

import errno


class UserError(Exception):
    """A problem with the user's input, explained in one line."""

    exit_code = 2


class BadValue(UserError, ValueError):
    """A value out of range or of the wrong kind (a config field, a layer number). Also a
    ValueError, as library callers expect."""


class ScoresNotFinite(UserError):
    """A search or scoring whose model gave NaN or +inf scores: weights finite but so large that
    the forward pass overflows. The engine that ran it puts its model's folder in front."""


class Interrupted(UserError):
    """Training stopped by SIGINT or SIGTERM after saving what it could; says how to go on."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C's KeyboardInterrupt so that clean-up code runs."""


class LostContact(UserError):
    """A distributed training whose other processes stopped answering (one crashed or was
    killed, or a collective timed out)."""

    exit_code = 1


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
