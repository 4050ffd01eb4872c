"""The one exception type users see: a single actionable line, never a traceback."""

import argparse


class InnError(Exception):
    """Bad input or a failed run, explained in one line that says what and where.

    The command line prints ``error: <message>`` and exits with status 2; library callers
    may catch it like any exception.
    """


def positive_int(text: str) -> int:
    """An ``argparse`` type for counts (threads, sequences, passes): a whole number of at least 1,
    so that ``--max-train -3`` is refused rather than silently dropping three sentences."""
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, not {text!r}")
    return int(text)
