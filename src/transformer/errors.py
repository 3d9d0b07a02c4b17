"""The exceptions that end a command with a message instead of a traceback.

The command line prints their message as a single line and exits with ``exit_code``; the message
must name the file, line or value at fault. Any other exception is a bug and shows as one.
"""


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
