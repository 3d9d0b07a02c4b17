"""The one exception type for mistakes a user can make (bad files, bad values).

The command line prints its message as a single line and exits non-zero; the message must name
the file, line or value at fault.
"""


class UserError(Exception):
    """A problem with the user's input, explained in one line."""
