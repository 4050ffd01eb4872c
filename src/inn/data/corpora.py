"""Part-of-speech corpora in one normalised form: a list of sentences of ``(word, tag)``.

Four formats, one shape:

- :func:`read_ptb`: the WSJ part of an LDC Penn Treebank 3 copy (licensed, never shipped),
  by section; trace tokens (tag ``-NONE-``) removed (:mod:`inn.data.treebank`).
- :func:`read_treebank_sample`: NLTK's free 199-file WSJ sample, read with NLTK's own corpus
  reader and split by file: wsj_0001-0139 train, 0140-0169 dev, 0170-0199 test (3,068 / 433 /
  413 sentences once -NONE- tokens are removed; :mod:`inn.data.treebank`).
- :func:`read_conllu`: a CoNLL-U file (UD English EWT carries PTB tags in its XPOS column),
  parsed line by line with the ``conllu`` package; multiword-token ranges and empty nodes are
  skipped because they are not surface tokens of the tagging task (:mod:`inn.data.conllu_files`).
- :func:`read_tagged`: two tab-separated columns, ``word<TAB>tag``, a blank line between
  sentences (also the form :func:`write_tagged` stores prepared splits in;
  :mod:`inn.data.tagged`).

:func:`read_corpus` dispatches on the corpus format the workflow's config names. Text files
are read strictly, as UTF-8 with or without a byte-order mark, plain or gzip-compressed: a
byte that is not UTF-8, a line of the wrong shape or a CoNLL-U sentence without its closing
blank line is an error naming file and line, never a silently different sentence; so is a tag
with whitespace at its start or end (``NN `` would be a tag class beside ``NN``), and text in
UTF-16 or UTF-32, named as such (:mod:`inn.data.text_files`). The readers are re-exported here.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from inn.data.conllu_files import EWT_FILES as EWT_FILES
from inn.data.conllu_files import read_conllu as read_conllu
from inn.data.conllu_files import read_ewt as read_ewt
from inn.data.tagged import SPLITS as SPLITS
from inn.data.tagged import Sentence as Sentence
from inn.data.tagged import read_tagged as read_tagged
from inn.data.tagged import write_tagged as write_tagged
from inn.data.text_files import is_blank, numbered_lines
from inn.data.text_files import wide_encoding as wide_encoding
from inn.data.treebank import read_ptb as read_ptb
from inn.data.treebank import read_treebank_sample as read_treebank_sample
from inn.data.treebank import read_wsj as read_wsj
from inn.errors import InnError
from inn.io import check_distinct_splits, check_regular_file


def has_tokens(path: str | os.PathLike, format: str) -> bool:
    """Whether a ``conllu`` or ``tsv`` corpus file holds a token line, read only up to the first
    one (cheap on a file of any size), so that an empty split is found before any work.

    Raises:
        InnError: ``path`` is a folder or missing, or its lines up to the first token are unreadable.
    """
    path = Path(path)
    check_regular_file(path, f"{format} corpus file")
    return any(
        not is_blank(line) and not (format == "conllu" and line.startswith("#")) for _, line in numbered_lines(path)
    )


#: Corpus formats the config may name, and how each is read from its ``source`` (the corpus's
#: config entry: ``train``/``dev``/``test`` files and ``tags`` for the two file formats, the
#: LDC root ``path`` for ``ptb``, the ``nltk_data`` folder for ``nltk_treebank``).
READERS = {
    "conllu": lambda source: {split: read_conllu(source[split], source.get("tags", "xpos")) for split in SPLITS},
    "tsv": lambda source: {split: read_tagged(source[split]) for split in SPLITS},
    "ptb": lambda source: read_wsj(source["path"]),
    "nltk_treebank": lambda source: read_treebank_sample(source.get("nltk_data")),
}


#: the formats whose splits are files of their own (``source[split]``)
FILE_SPLITS = {"conllu": SPLITS, "tsv": SPLITS}


#: the formats of the Penn Treebank's English (its conventions: escaped brackets, PTB quotes)
PTB_FORMATS = ("ptb", "nltk_treebank")


def corpus_language(format: str, source: dict) -> str | None:
    """The language of a corpus, where its format or files say it: ``en`` for the Penn
    Treebank's formats, the code a Universal Dependencies file name starts with
    (``fr_gsd-ud-train.conllu`` -> ``fr``) for CoNLL-U; else ``None`` (unknown)."""
    if format in PTB_FORMATS:
        return "en"
    for split in SPLITS:
        name = Path(str(source.get(split) or "")).name
        match = re.match(r"([a-z]{2,3})_[a-z0-9]+-ud-(?:train|dev|test)\.conllu", name)
        if match:
            return match.group(1)
    return None


def read_corpus(format: str, source: dict, name: str | None = None) -> dict[str, list[Sentence]]:
    """Read every split of a corpus of ``format`` (a key of :data:`READERS`).

    ``name``: the corpus's name under ``corpora`` in the workflow's config, so that an empty
    split is named by its config key (``corpora.<name>.dev``).

    Raises:
        InnError: unknown format, unreadable corpus, or an empty split.
    """
    if format not in READERS:
        raise InnError(f"unknown corpus format {format!r}; choose one of {sorted(READERS)}")
    if format in FILE_SPLITS:
        check_distinct_splits(
            {split: source[split] for split in FILE_SPLITS[format] if source.get(split)},
            f"corpora.{name}." if name else "--",
        )
    splits = READERS[format](source)
    for split in SPLITS:
        if not splits.get(split):
            if split in FILE_SPLITS.get(format, ()):
                key = f"corpora.{name}.{split}: " if name else f"the {split} file "
                raise InnError(f"{key}{source[split]} holds no sentences: name a file with at least one")
            corpus = f"corpora.{name}" if name else f"this {format} corpus"
            raise InnError(f"the {split} split of {corpus} is empty")
    return splits
