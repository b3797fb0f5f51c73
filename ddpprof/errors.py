"""The one exception type that means "the user's input is wrong": the CLI prints it on one line
and exits 2, with no traceback."""


class UsageError(Exception):
    """Bad input: a message that names the file or option and the problem."""
