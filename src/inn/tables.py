"""Tables as TSV: the format every stage writes and the report and users read (pandas)."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

from inn.errors import InnError
from inn.io import atomic_open


def write_tsv(path: str | os.PathLike, frame: pd.DataFrame) -> None:
    """Write ``frame`` as TSV without its index, atomically: floats to six significant digits,
    whole numbers exactly (a parameter count of 2,049,001 in a column with gaps is a float
    column, and six digits would write 2.049e+06)."""
    with atomic_open(path, encoding="utf-8", newline="") as handle:
        _whole_numbers_exact(frame).to_csv(handle, sep="\t", index=False, float_format="%.6g")


def _whole_numbers_exact(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with its float columns of whole numbers past six digits (and below 2**53,
    where floats stop being exact integers) as nullable integers."""
    exact = {}
    for column in frame.columns[[kind == "f" for kind in frame.dtypes.map(lambda d: d.kind)]]:
        values = frame[column].dropna()
        if (
            len(values)
            and np.isfinite(values).all()
            and 1e6 <= values.abs().max() < 2**53
            and (values == values.round()).all()
        ):  # (past 2**53 every float is whole: no count)
            exact[column] = frame[column].round().astype("Int64")
    return frame.assign(**exact) if exact else frame


#: Columns that hold words, labels and commits: read as text, as written. pandas would otherwise
#: read a tag such as ``NA``, ``NULL`` or ``nan`` as a missing value (which equals nothing, so a
#: right tag would count as wrong), ``01`` as the number 1, and a history's commit of digits
#: alone (``0123456``) as the number 123456.
TEXT_COLUMNS = ("word", "gold", "predicted", "commit")


def read_tsv(path: str | os.PathLike) -> pd.DataFrame:
    """Read a TSV written by :func:`write_tsv`: an empty cell is missing (as ``write_tsv`` writes
    NaN), any text is kept, and :data:`TEXT_COLUMNS` stay text."""
    if not os.path.isfile(path):
        raise InnError(f"table not found: {path}")
    return pd.read_csv(path, sep="\t", keep_default_na=False, na_values=[""], dtype=dict.fromkeys(TEXT_COLUMNS, str))
