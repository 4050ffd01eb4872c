"""The Penn Treebank's WSJ text: an LDC Penn Treebank 3 copy (licensed, never shipped) read by
section (:func:`read_ptb`, the standard split :func:`read_wsj`), and NLTK's free 199-file WSJ
sample split by file (:func:`read_treebank_sample`: wsj_0001-0139 train, 0140-0169 dev,
0170-0199 test; 3,068 / 433 / 413 sentences). Both are read with NLTK's corpus readers; trace
tokens (tag ``-NONE-``) are removed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from inn.data.tagged import Sentence
from inn.errors import InnError

#: WSJ standard split (sections 00-18 / 19-21 / 22-24).
WSJ_SECTIONS = {
    "train": tuple(range(0, 19)),
    "dev": tuple(range(19, 22)),
    "test": tuple(range(22, 25)),
}
#: NLTK's treebank sample (files wsj_0001..wsj_0199) split by file number, inclusive ranges.
SAMPLE_FILES = {"train": (1, 139), "dev": (140, 169), "test": (170, 199)}
TRACE_TAG = "-NONE-"


def _drop_traces(tagged: Iterable[tuple[str, str]]) -> Sentence:
    return [(word, tag) for word, tag in tagged if tag != TRACE_TAG]


def _ptb_reader(root: Path):
    """NLTK's reader for an LDC PTB-3 copy: parsed ``.mrg`` when present, else tagged ``.pos``.

    The ``.mrg`` trees carry the canonical sentence boundaries; the ``.pos`` files are read the
    way NLTK reads its own tagged treebank (sentences end at a ``./.`` token).
    """
    from nltk.corpus.reader import BracketParseCorpusReader, ChunkedCorpusReader
    from nltk.corpus.reader.util import tagged_treebank_para_block_reader
    from nltk.tokenize import RegexpTokenizer

    mrg, pos = root / "parsed" / "mrg" / "wsj", root / "tagged" / "pos" / "wsj"
    _trust(root)
    if mrg.is_dir():
        return mrg, ".mrg", BracketParseCorpusReader(str(mrg), r"\d\d/wsj_\d+\.mrg")
    if pos.is_dir():
        reader = ChunkedCorpusReader(
            str(pos),
            r"\d\d/wsj_\d+\.pos",
            sent_tokenizer=RegexpTokenizer(r"(?<=/\.)\s*(?![^\[]*\])", gaps=True),
            para_block_reader=tagged_treebank_para_block_reader,
        )
        return pos, ".pos", reader
    raise InnError(
        f"no Penn Treebank 3 WSJ files under {root}: expected {mrg} or {pos} "
        "(corpora.wsj.path must be the root of the LDC copy)"
    )


def read_ptb(root: str | os.PathLike, sections: Sequence[int]) -> list[Sentence]:
    """Read WSJ ``sections`` (e.g. ``range(19)``) from an LDC Penn Treebank 3 copy at ``root``.

    ``root`` is the folder that holds ``parsed/mrg/wsj/SS/*.mrg`` (preferred) or
    ``tagged/pos/wsj/SS/*.pos``. Trace tokens (``-NONE-``) are removed; sentences left empty
    by that are dropped.

    Raises:
        InnError: ``root`` is missing, holds no WSJ files, or lacks one of ``sections``.
    """
    root = Path(root)
    if not root.is_dir():
        raise InnError(f"Penn Treebank folder not found: {root} (set corpora.wsj.path)")
    base, suffix, reader = _ptb_reader(root)
    sentences: list[Sentence] = []
    for section in sections:
        fileids = sorted(f for f in reader.fileids() if f.startswith(f"{section:02d}/"))
        if not fileids:
            raise InnError(
                f"Penn Treebank copy at {root} lacks WSJ section {section:02d} "
                f"(no {suffix} files in {base / f'{section:02d}'})"
            )
        for fileid in fileids:
            for tagged in reader.tagged_sents(fileid):
                sentence = _drop_traces(tagged)
                if sentence:
                    sentences.append(sentence)
    return sentences


def read_wsj(root: str | os.PathLike) -> dict[str, list[Sentence]]:
    """The standard WSJ split of an LDC copy: sections 00-18 / 19-21 / 22-24."""
    return {split: read_ptb(root, sections) for split, sections in WSJ_SECTIONS.items()}


def _trust(folder: str | os.PathLike) -> None:
    """Put ``folder`` on NLTK's data path: NLTK (3.9+) reads corpora only below those roots."""
    import nltk

    folder = str(Path(folder).resolve())
    if folder not in nltk.data.path:
        nltk.data.path.insert(0, folder)


def read_treebank_sample(nltk_data: str | os.PathLike | None = None) -> dict[str, list[Sentence]]:
    """NLTK's Penn Treebank sample split by file (wsj_0001-0139 / 0140-0169 / 0170-0199).

    Args:
        nltk_data: an NLTK data folder holding ``corpora/treebank``; ``None`` searches NLTK's
            usual path (the ``NLTK_DATA`` environment variable, then the default folders).
    """
    import nltk
    from nltk.corpus.reader import BracketParseCorpusReader
    from nltk.corpus.util import LazyCorpusLoader

    if nltk_data is not None:
        if not Path(nltk_data).is_dir():
            raise InnError(f"NLTK data folder not found: {nltk_data} (corpora.ptb_sample.nltk_data)")
        _trust(nltk_data)
    # A fresh loader (not the nltk.corpus.treebank singleton) so that it resolves against the
    # data path as it is now; the arguments are those NLTK itself uses for the sample. A folder
    # given is the only one searched: another copy on NLTK's path must not stand in for it.
    treebank = LazyCorpusLoader(
        "treebank/combined", BracketParseCorpusReader, r"wsj_.*\.mrg", tagset="wsj", encoding="ascii"
    )
    searched = list(nltk.data.path)
    if nltk_data is not None:
        nltk.data.path[:] = [str(Path(nltk_data).resolve())]
    try:
        fileids = treebank.fileids()
    except LookupError:
        for root in nltk.data.path:
            archive = Path(root) / "corpora" / "treebank.zip"
            if archive.is_dir():  # NLTK would pass it over in silence
                raise InnError(
                    f"{archive} is a folder where NLTK's treebank sample archive goes: move it aside "
                    f"(or delete it) and run `inn download-treebank --out-dir {root}`"
                ) from None
        where = (
            f"the NLTK data folder {nltk_data} holds no corpora/treebank"
            if nltk_data is not None
            else "NLTK's treebank sample is not installed"
        )
        raise InnError(
            f"{where}: run `inn download-treebank --out-dir DIR` and point corpora.ptb_sample.nltk_data "
            "(or NLTK_DATA) at DIR, a folder holding corpora/treebank"
        ) from None
    finally:
        nltk.data.path[:] = searched
    splits: dict[str, list[Sentence]] = {}
    for split, (first, last) in SAMPLE_FILES.items():
        ids = [f for f in fileids if first <= int(f[4:8]) <= last]
        splits[split] = [s for s in (_drop_traces(t) for f in ids for t in treebank.tagged_sents(f)) if s]
    return splits
