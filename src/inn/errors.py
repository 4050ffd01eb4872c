"""The one exception type users see: a single actionable line, never a traceback."""

import argparse
import math


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


def at_least(minimum: int):
    """An ``argparse`` type for a whole number of at least ``minimum`` (``--max-len`` needs 2)."""

    def whole(text: str) -> int:
        if not text.strip().isdigit() or int(text) < minimum:
            raise argparse.ArgumentTypeError(f"must be a whole number of at least {minimum}, not {text!r}")
        return int(text)

    whole.__name__ = f"at_least_{minimum}"
    return whole


def positive_float(text: str) -> float:
    """An ``argparse`` type for a finite number above 0 (a walk bias b, a tolerance): ``-1``,
    ``0``, ``nan`` and ``inf`` are refused by name rather than failing later or running a
    degenerate task."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number above 0, not {text!r}")
    return value


class CellError(InnError):
    """A cell that misbehaves on the probe its implicit layer runs when it is built
    (:func:`inn.nn.probe.check_cell`): an output of the wrong shape, dtype or device, a
    non-finite output from finite input, or an error in its forward."""
