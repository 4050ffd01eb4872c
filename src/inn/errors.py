"""The one exception type users see: a single actionable line, never a traceback."""


class InnError(Exception):
    """Bad input or a failed run, explained in one line that says what and where.

    The command line prints ``error: <message>`` and exits with status 2; library callers
    may catch it like any exception.
    """
