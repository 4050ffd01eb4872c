"""Tables as TSV: the format every stage writes and the report and users read (pandas)."""

from __future__ import annotations

import argparse
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


def concat_main(argv: list[str]) -> None:
    """``inn concat-tables --out OUT IN...``: stack TSVs with the same columns into one."""
    parser = argparse.ArgumentParser(prog="inn concat-tables", description=concat_main.__doc__)
    parser.add_argument("--out", required=True)
    parser.add_argument("inputs", nargs="*")
    args = parser.parse_args(argv)
    frames = [read_tsv(p) for p in args.inputs]
    write_tsv(args.out, pd.concat(frames, ignore_index=True) if frames else pd.DataFrame())
