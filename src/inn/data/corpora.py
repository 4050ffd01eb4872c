"""Part-of-speech corpora in one normalised form: a list of sentences of ``(word, tag)``.

Four formats, one shape:

- :func:`read_ptb`: the WSJ part of an LDC Penn Treebank 3 copy (licensed, never shipped),
  by section; trace tokens (tag ``-NONE-``) removed.
- :func:`read_treebank_sample`: NLTK's free 199-file WSJ sample, read with NLTK's own corpus
  reader and split by file as in SPEC.md.
- :func:`read_conllu`: a CoNLL-U file (UD English EWT carries PTB tags in its XPOS column),
  parsed line by line with the ``conllu`` package; multiword-token ranges and empty nodes are
  skipped because they are not surface tokens of the tagging task.
- :func:`read_tagged`: two tab-separated columns, ``word<TAB>tag``, a blank line between
  sentences (also the form :func:`write_tagged` stores prepared splits in).

:func:`read_corpus` dispatches on the corpus format the workflow's config names. Text files
are read as UTF-8 with or without a byte-order mark.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from conllu.exceptions import ParseException
from conllu.parser import DEFAULT_FIELDS, parse_line

from inn.errors import InnError
from inn.io import atomic_open

log = logging.getLogger(__name__)

Sentence = list[tuple[str, str]]

SPLITS = ("train", "dev", "test")
#: WSJ standard split (sections 00-18 / 19-21 / 22-24).
WSJ_SECTIONS = {
    "train": tuple(range(0, 19)),
    "dev": tuple(range(19, 22)),
    "test": tuple(range(22, 25)),
}
#: NLTK's treebank sample (files wsj_0001..wsj_0199) split by file number, inclusive ranges.
SAMPLE_FILES = {"train": (1, 139), "dev": (140, 169), "test": (170, 199)}
#: UD English EWT file names, by split.
EWT_FILES = {split: f"en_ewt-ud-{split}.conllu" for split in SPLITS}
TRACE_TAG = "-NONE-"
_CONLLU_COLUMNS = len(DEFAULT_FIELDS)


def _drop_traces(tagged: Iterable[tuple[str, str]]) -> Sentence:
    return [(word, tag) for word, tag in tagged if tag != TRACE_TAG]


def _blocks(path: Path) -> Iterator[list[tuple[int, str]]]:
    """The blank-line-separated blocks of a text file, as (line number, line) pairs."""
    block: list[tuple[int, str]] = []
    with open(path, encoding="utf-8-sig") as handle:  # a leading BOM is not part of line 1
        for lineno, raw in enumerate(handle, start=1):
            line = raw.rstrip("\r\n")
            if line.strip():
                block.append((lineno, line))
            elif block:
                yield block
                block = []
    if block:
        yield block


# --------------------------------------------------------------------------- CoNLL-U


def read_conllu(path: str | os.PathLike, column: str = "xpos") -> list[Sentence]:
    """Read a CoNLL-U file into sentences of ``(form, tag)`` with the tag from ``column``.

    Args:
        path: the ``.conllu`` file.
        column: the tag column, ``"xpos"`` (PTB tags in EWT) or ``"upos"``.

    Returns:
        One list of ``(form, tag)`` per sentence, in file order.

    Raises:
        InnError: the file is missing, a line is malformed (the message names file and line),
            a token lacks a tag in ``column``, or the file holds no sentence.
    """
    path = Path(path)
    if column not in ("xpos", "upos"):
        raise InnError(f"read_conllu: column must be 'xpos' or 'upos', not {column!r}")
    if not path.is_file():
        raise InnError(f"CoNLL-U file not found: {path}")
    sentences: list[Sentence] = []
    for block in _blocks(path):
        sentence: Sentence = []
        for lineno, line in block:
            if line.startswith("#"):
                continue
            where = f"{path}:{lineno}"
            fields = line.split("\t")
            if len(fields) != _CONLLU_COLUMNS:
                raise InnError(
                    f"{where}: malformed CoNLL-U line: expected {_CONLLU_COLUMNS} "
                    f"tab-separated fields, found {len(fields)}"
                )
            try:
                token = parse_line(line, DEFAULT_FIELDS)
            except ParseException as exc:
                raise InnError(f"{where}: malformed CoNLL-U line: {exc}") from None
            if not isinstance(token["id"], int):
                continue  # a multiword range (1-2) or an empty node (1.1): no surface token
            tag = token[column]
            if tag in (None, "_"):
                other = "upos" if column == "xpos" else "xpos"
                raise InnError(f"{where}: token {token['form']!r} has no {column.upper()} tag "
                               f"(read the {other.upper()} column instead: tags: {other})")
            sentence.append((token["form"], tag))
        if sentence:
            sentences.append(sentence)
    if not sentences:
        raise InnError(f"{path}: no sentences in this CoNLL-U file")
    return sentences


def read_ewt(root: str | os.PathLike) -> dict[str, list[Sentence]]:
    """Read UD English EWT's train/dev/test files from the folder ``root``."""
    root = Path(root)
    if not root.is_dir():
        raise InnError(
            f"UD English EWT folder not found: {root} "
            "(the workflow reads the files that corpora.ewt.train, .dev and .test name)"
        )
    return {split: read_conllu(root / name) for split, name in EWT_FILES.items()}


# --------------------------------------------------------------------------- Penn Treebank


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
            raise InnError(f"Penn Treebank copy at {root} lacks WSJ section {section:02d} "
                           f"(no {suffix} files in {base / f'{section:02d}'})")
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
    from nltk.corpus.reader import BracketParseCorpusReader
    from nltk.corpus.util import LazyCorpusLoader

    if nltk_data is not None:
        if not Path(nltk_data).is_dir():
            raise InnError(f"NLTK data folder not found: {nltk_data} (corpora.ptb_sample.nltk_data)")
        _trust(nltk_data)
    # A fresh loader (not the nltk.corpus.treebank singleton) so that it resolves against the
    # data path as it is now; the arguments are those NLTK itself uses for the sample.
    treebank = LazyCorpusLoader("treebank/combined", BracketParseCorpusReader, r"wsj_.*\.mrg",
                                tagset="wsj", encoding="ascii")
    try:
        fileids = treebank.fileids()
    except LookupError:
        raise InnError(
            "NLTK's treebank sample is not installed: run `inn download-treebank --out DIR` and point "
            "corpora.ptb_sample.nltk_data (or NLTK_DATA) at DIR, a folder holding corpora/treebank"
        ) from None
    splits: dict[str, list[Sentence]] = {}
    for split, (first, last) in SAMPLE_FILES.items():
        ids = [f for f in fileids if first <= int(f[4:8]) <= last]
        splits[split] = [s for s in (_drop_traces(t) for f in ids for t in treebank.tagged_sents(f)) if s]
    return splits


#: Corpus formats the config may name, and how each is read from its ``source`` (the corpus's
#: config entry: ``train``/``dev``/``test`` files and ``tags`` for the two file formats, the
#: LDC root ``path`` for ``ptb``, the ``nltk_data`` folder for ``nltk_treebank``).
READERS = {
    "conllu": lambda source: {split: read_conllu(source[split], source.get("tags", "xpos")) for split in SPLITS},
    "tsv": lambda source: {split: read_tagged(source[split]) for split in SPLITS},
    "ptb": lambda source: read_wsj(source["path"]),
    "nltk_treebank": lambda source: read_treebank_sample(source.get("nltk_data")),
}


def read_corpus(format: str, source: dict) -> dict[str, list[Sentence]]:
    """Read every split of a corpus of ``format`` (a key of :data:`READERS`).

    Raises:
        InnError: unknown format, unreadable corpus, or an empty split.
    """
    if format not in READERS:
        raise InnError(f"unknown corpus format {format!r}; choose one of {sorted(READERS)}")
    splits = READERS[format](source)
    for split in SPLITS:
        if not splits.get(split):
            raise InnError(f"the {split} split of this {format} corpus is empty ({source})")
    return splits


# --------------------------------------------------------------------------- storage


def write_tagged(path: str | os.PathLike, sentences: Iterable[Sentence]) -> None:
    """Write sentences as ``word<TAB>tag`` lines, a blank line after each sentence (atomic)."""
    with atomic_open(path, encoding="utf-8", newline="\n") as handle:
        for sentence in sentences:
            for word, tag in sentence:
                if "\t" in word or "\n" in word:
                    raise InnError(f"{path}: token {word!r} contains a tab or newline")
                handle.write(f"{word}\t{tag}\n")
            handle.write("\n")


def read_tagged(path: str | os.PathLike) -> list[Sentence]:
    """Read ``word<TAB>tag`` lines, a blank line between sentences (as :func:`write_tagged` writes)."""
    path = Path(path)
    if not path.is_file():
        raise InnError(f"tagged corpus file not found: {path}")
    sentences: list[Sentence] = []
    for block in _blocks(path):
        sentence: Sentence = []
        for lineno, line in block:
            word, sep, tag = line.partition("\t")
            if not sep or not tag:
                raise InnError(f"{path}:{lineno}: expected 'word<TAB>tag', found {line!r}")
            sentence.append((word, tag))
        sentences.append(sentence)
    return sentences
