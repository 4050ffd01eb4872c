"""Fetch the free corpora for users who have none (never used by tests or CI)."""

from __future__ import annotations

import argparse
import logging
import urllib.request
from pathlib import Path

from inn.data.corpora import EWT_FILES, read_conllu
from inn.errors import InnError
from inn.io import atomic_path

log = logging.getLogger(__name__)

EWT_URL = "https://raw.githubusercontent.com/UniversalDependencies/UD_English-EWT/{release}/{name}"


def fetch_ewt(release: str, out: str | Path) -> None:
    """Download UD English EWT's three CoNLL-U files of a tagged ``release`` (e.g. ``r2.15``).

    Each file is parsed before it is moved into place, so ``out`` never holds a truncated or
    malformed download.
    """
    out = Path(out)
    for name in EWT_FILES.values():
        url = EWT_URL.format(release=release, name=name)
        log.info("downloading %s", url)
        with atomic_path(out / name) as tmp:
            try:
                urllib.request.urlretrieve(url, tmp)
            except OSError as exc:
                raise InnError(f"could not download {url}: {exc}; download the UD English EWT "
                               "files by hand and set corpora.ewt.path to their folder") from None
            read_conllu(tmp)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="inn download-ewt", description=fetch_ewt.__doc__)
    parser.add_argument("--release", default="r2.15", help="UD_English-EWT git tag")
    parser.add_argument("--out", required=True, help="output folder")
    args = parser.parse_args(argv)
    fetch_ewt(args.release, args.out)
