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


def read_tsv(path: str | os.PathLike) -> pd.DataFrame:
    """Read a TSV written by :func:`write_tsv`."""
    if not os.path.isfile(path):
        raise InnError(f"table not found: {path}")
    return pd.read_csv(path, sep="\t")
