"""Fetch the free corpora for users who have none (never used by tests or CI).

Both downloads are non-interactive: without a network they stop with one line that names what
could not be fetched and the config key that points the workflow at a local copy instead.
"""

from __future__ import annotations

import argparse
import io
import logging
import urllib.request
from pathlib import Path

from inn.data.corpora import EWT_FILES, read_conllu, read_treebank_sample
from inn.errors import InnError
from inn.io import atomic_path

log = logging.getLogger(__name__)

EWT_URL = "https://raw.githubusercontent.com/UniversalDependencies/UD_English-EWT/{release}/{name}"


def _reason(exc: BaseException) -> str:
    """The short cause of a failed download (``URLError`` wraps it in ``reason``)."""
    return str(getattr(exc, "reason", None) or exc)


def fetch_ewt(release: str, out: str | Path) -> None:
    """Download UD English EWT's three CoNLL-U files of a tagged ``release`` (e.g. ``r2.15``).

    Each file is parsed before it is moved into place, so ``out`` never holds a truncated or
    malformed download.

    Raises:
        InnError: a file could not be fetched (one line: the URL, the cause, what to do).
    """
    out = Path(out)
    for name in EWT_FILES.values():
        url = EWT_URL.format(release=release, name=name)
        log.info("downloading %s", url)
        with atomic_path(out / name) as tmp:
            try:
                urllib.request.urlretrieve(url, tmp)
            except OSError as exc:
                raise InnError(
                    f"could not download UD English EWT {release} ({url}: {_reason(exc)}); without a "
                    "network, copy its three .conllu files elsewhere and set corpora.ewt.train, .dev and "
                    ".test to them") from None
            read_conllu(tmp)


def fetch_treebank(out: str | Path) -> None:
    """Download NLTK's Penn Treebank sample into the NLTK data folder ``out`` (NLTK's own
    downloader, which checks the archive against NLTK's index, asked never to prompt).

    Raises:
        InnError: the sample could not be fetched or read (one line, with what to do).
    """
    import nltk

    out = Path(out)
    log.info("downloading NLTK's treebank sample into %s", out)
    try:
        ok = nltk.download("treebank", download_dir=str(out), quiet=True, raise_on_error=True,
                           print_error_to=io.StringIO())
    except (OSError, ValueError) as exc:
        ok, cause = False, _reason(exc)
    else:
        cause = "NLTK's downloader gave up"
    if not ok:
        raise InnError(
            f"could not download NLTK's treebank sample ({cause}); without a network, point "
            "corpora.ptb_sample.nltk_data at an NLTK data folder holding corpora/treebank (or null to "
            "search NLTK_DATA)")
    read_treebank_sample(out)  # the archive is there and NLTK reads it


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="inn download-ewt", description=fetch_ewt.__doc__)
    parser.add_argument("--release", default="r2.15", help="UD_English-EWT git tag")
    parser.add_argument("--out", required=True, help="output folder")
    args = parser.parse_args(argv)
    fetch_ewt(args.release, args.out)


def treebank_main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="inn download-treebank", description=fetch_treebank.__doc__)
    parser.add_argument("--out", required=True, help="NLTK data folder (the archive goes to corpora/)")
    args = parser.parse_args(argv)
    fetch_treebank(args.out)
