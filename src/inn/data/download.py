"""Fetch the free corpora: for the workflow when a user has none, and for a contributor's tests
(``inn download-dev-corpora``). Tests and CI themselves never download.

Every download is non-interactive: without a network it stops with one line that names what
could not be fetched and where a local copy goes instead (a config key, or ``INN_SHARED_DATA``).
Files of a pinned release are checked against the checksums below, both when downloaded and
when already in place, so a truncated or altered copy is never used; one that is already in
place and matches is kept, and nothing is downloaded for it.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import logging
import os
import tempfile
import urllib.request
from pathlib import Path

from inn.data.conllu_files import EWT_FILES, read_conllu
from inn.data.treebank import read_treebank_sample
from inn.errors import InnError
from inn.io import atomic_path

log = logging.getLogger(__name__)

#: The UD English EWT release the workflow and the tests read.
EWT_RELEASE = "r2.15"
EWT_URL = "https://raw.githubusercontent.com/UniversalDependencies/UD_English-EWT/{release}/{name}"
#: sha256 of the files of the releases we pin (others are only parsed).
EWT_SHA256 = {
    "r2.15": {
        "en_ewt-ud-train.conllu": "3fb78e2b55482c8ee00caa653af436c88c9e5bc9a73ce26e4ae3ddc79d2b7e7b",
        "en_ewt-ud-dev.conllu": "531a54ff90d6ab12201c5a50c3e78e6ddac4de69abc4bce5d275d3cd29efe2b6",
        "en_ewt-ud-test.conllu": "e266e515a0a7547657ed3d90d9ba46487d6bd251f27ad4269d4e8a427c8555cd",
    },
}
#: NLTK's data index (None: NLTK's own default); a mirror's ``index.xml`` can replace it.
NLTK_INDEX_URL: str | None = None
#: sha256 of ``corpora/treebank.zip`` as NLTK's index serves it.
TREEBANK_SHA256 = "9da92d76c3666cfb6cddeaed0f7e86b344cce0f0928a286d439e555f19c37399"

#: The development corpora's layout in a folder such as ``INN_SHARED_DATA``.
DEV_EWT, DEV_NLTK = "ud-english-ewt", "nltk_data"

#: Where a local copy goes instead of a download (the end of the one-line error).
EWT_LOCAL = "copy its three .conllu files elsewhere and set corpora.ewt.train, .dev and .test to them"
TREEBANK_LOCAL = (
    "point corpora.ptb_sample.nltk_data at an NLTK data folder holding corpora/treebank (or null to search NLTK_DATA)"
)
DEV_LOCAL = (
    f"put copies in a folder as {DEV_EWT}/en_ewt-ud-{{train,dev,test}}.conllu and "
    f"{DEV_NLTK}/corpora/treebank.zip and set INN_SHARED_DATA to it"
)


def _reason(exc: BaseException) -> str:
    """The short cause of a failed download (``URLError`` wraps it in ``reason``)."""
    return str(getattr(exc, "reason", None) or exc)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _verify(path: Path, sha256: str, what: str, fix: str) -> None:
    """Refuse ``path`` (described as ``what``) unless its sha256 is the pinned ``sha256``."""
    got = _sha256(path)
    if got != sha256:
        raise InnError(
            f"{what} does not match its pinned checksum (sha256 {got[:16]}..., expected {sha256[:16]}...); {fix}"
        )


def _in_place(path: Path, sha256: str | None) -> bool:
    """Whether ``path`` already holds the pinned file (nothing to download); a file there that
    differs, or a folder there, is refused rather than overwritten or used. Unpinned files are
    always fetched."""
    if path.is_dir():
        raise InnError(
            f"{path} is a folder where the file {path.name} goes: move it aside (or delete it), then rerun the download"
        )
    if sha256 is None or not path.exists():
        return False
    _verify(path, sha256, str(path), "delete it and rerun the download")
    log.info("%s is in place (checksum verified)", path)
    return True


def fetch_ewt(release: str, out: str | Path, *, local_copy: str = EWT_LOCAL) -> None:
    """Download UD English EWT's three CoNLL-U files of a tagged ``release`` (e.g. ``r2.15``).

    Each file is checked (the release's pinned checksum, if any) and parsed before it is moved
    into place, so ``out`` never holds a truncated, altered or malformed download. Files of a
    pinned release already in ``out`` are kept when they match and refused when they do not.

    Args:
        local_copy: where a local copy goes instead, the end of the offline error.

    Raises:
        InnError: a file could not be fetched or does not match (one line: what, why, what to do).
    """
    out = Path(out)
    pinned = EWT_SHA256.get(release, {})
    for name in EWT_FILES.values():
        if _in_place(out / name, pinned.get(name)):
            continue
        url = EWT_URL.format(release=release, name=name)
        log.info("downloading %s", url)
        with atomic_path(out / name) as tmp:
            try:
                urllib.request.urlretrieve(url, tmp)
            except OSError as exc:
                raise InnError(
                    f"could not download UD English EWT {release} ({url}: {_reason(exc)}); without a "
                    f"network, {local_copy}"
                ) from None
            if name in pinned:
                _verify(tmp, pinned[name], f"the download of {url}", f"nothing was kept: retry, or {local_copy}")
            read_conllu(tmp)


def fetch_treebank(out: str | Path, *, local_copy: str = TREEBANK_LOCAL) -> None:
    """Download NLTK's Penn Treebank sample into the NLTK data folder ``out``
    (``corpora/treebank.zip``, which NLTK reads as it is).

    NLTK's own downloader fetches it into a temporary folder beside the target, asked never to
    prompt, and checks it against NLTK's index; the archive then has to match the pinned
    checksum too before it is moved into place. An archive already there that matches is kept.

    Args:
        local_copy: where a local copy goes instead, the end of the offline error.

    Raises:
        InnError: the sample could not be fetched, does not match or cannot be read (one line).
    """
    from nltk.downloader import Downloader

    out = Path(out)
    target = out / "corpora" / "treebank.zip"
    if _in_place(target, TREEBANK_SHA256):
        return
    log.info("downloading NLTK's treebank sample into %s", out)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".treebank.", dir=target.parent) as tmp:
        try:
            ok = Downloader(server_index_url=NLTK_INDEX_URL).download(
                "treebank", download_dir=tmp, quiet=True, raise_on_error=True, print_error_to=io.StringIO()
            )
        except (OSError, ValueError) as exc:
            ok, cause = False, _reason(exc)
        else:
            cause = "NLTK's downloader gave up"
        if not ok:
            raise InnError(f"could not download NLTK's treebank sample ({cause}); without a network, {local_copy}")
        fetched = Path(tmp) / "corpora" / "treebank.zip"
        _verify(
            fetched,
            TREEBANK_SHA256,
            "NLTK's treebank sample as downloaded",
            f"nothing was kept: retry, or {local_copy}",
        )
        os.replace(fetched, target)
    read_treebank_sample(out)  # NLTK reads the archive


def fetch_dev_corpora(out: str | Path) -> None:
    """Fetch the development corpora the tests read into ``out``, laid out as ``INN_SHARED_DATA``:
    UD English EWT at the pinned release in ``ud-english-ewt/`` and NLTK's treebank sample in
    ``nltk_data/corpora/treebank.zip``, each checked against its pinned checksum.

    Idempotent: files in place that match are kept and nothing is downloaded for them; one that
    does not match is refused (delete it and rerun).

    Raises:
        InnError: a corpus could not be fetched or does not match (one line, with what to do).
    """
    out = Path(out)
    fetch_ewt(EWT_RELEASE, out / DEV_EWT, local_copy=DEV_LOCAL)
    fetch_treebank(out / DEV_NLTK, local_copy=DEV_LOCAL)
    log.info("the development corpora are in %s", out)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="inn download-ewt", description=fetch_ewt.__doc__)
    parser.add_argument("--release", default=EWT_RELEASE, help="UD_English-EWT git tag")
    parser.add_argument("--out-dir", dest="out", required=True, help="output folder")
    args = parser.parse_args(argv)
    fetch_ewt(args.release, args.out)


def treebank_main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="inn download-treebank", description=fetch_treebank.__doc__)
    parser.add_argument("--out-dir", dest="out", required=True, help="NLTK data folder (the archive goes to corpora/)")
    args = parser.parse_args(argv)
    fetch_treebank(args.out)


def dev_main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="inn download-dev-corpora", description=fetch_dev_corpora.__doc__)
    parser.add_argument(
        "--out-dir",
        dest="out",
        required=True,
        help="folder for the corpora: the checkout's .dev-data is where the tests look by default",
    )
    args = parser.parse_args(argv)
    fetch_dev_corpora(args.out)
