"""Tables as TSV: the format every stage writes and the report and users read (pandas)."""

from __future__ import annotations

import os

import pandas as pd

from inn.errors import InnError
from inn.io import atomic_open


def write_tsv(path: str | os.PathLike, frame: pd.DataFrame) -> None:
    """Write ``frame`` as TSV without its index, atomically."""
    with atomic_open(path, encoding="utf-8", newline="") as handle:
        frame.to_csv(handle, sep="\t", index=False, float_format="%.6g")


#: Columns that hold words and labels: read as text, as written. pandas would otherwise read a
#: tag such as ``NA``, ``NULL`` or ``nan`` as a missing value (which equals nothing, so a right
#: tag would count as wrong) and ``01`` as the number 1.
TEXT_COLUMNS = ("word", "gold", "predicted")


def read_tsv(path: str | os.PathLike) -> pd.DataFrame:
    """Read a TSV written by :func:`write_tsv`: an empty cell is missing (as ``write_tsv`` writes
    NaN), any text is kept, and :data:`TEXT_COLUMNS` stay text."""
    if not os.path.isfile(path):
        raise InnError(f"table not found: {path}")
    return pd.read_csv(path, sep="\t", keep_default_na=False, na_values=[""],
                       dtype=dict.fromkeys(TEXT_COLUMNS, str))
