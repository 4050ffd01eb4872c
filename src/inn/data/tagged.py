"""The normalised form of a POS corpus: sentences of ``(word, tag)``, in train/dev/test splits,
stored as ``word<TAB>tag`` lines with a blank line between sentences (:func:`write_tagged`,
:func:`read_tagged`); and the check every reader applies to a word or tag field
(:func:`check_tag`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from inn.data.text_files import file_blocks
from inn.errors import InnError
from inn.io import atomic_open, check_regular_file

Sentence = list[tuple[str, str]]

SPLITS = ("train", "dev", "test")


def check_tag(tag: str, where: str, what: str = "tag", conllu: bool = False) -> None:
    """Stop at a tag with whitespace at its start or end (``NN `` beside ``NN``), which would
    silently be a tag class of its own; in a CoNLL-U tag column (``conllu``) at whitespace
    anywhere, which the format allows only in FORM, LEMMA and MISC. A ``word`` of a
    ``word<TAB>tag`` file is checked the same way (``cat `` would be a word beside ``cat``); a
    space inside it (``New York``) is kept."""
    if tag != tag.strip():
        kind = "word" if what == "word" else "tag class"
        raise InnError(
            f"{where}: {what} {tag!r} has whitespace at its start or end: remove it (as it is, it "
            f"would be a {kind} of its own)"
        )
    if conllu and any(char.isspace() for char in tag):
        raise InnError(
            f"{where}: malformed CoNLL-U line: {what} {tag!r} holds whitespace, which CoNLL-U allows "
            "only in FORM, LEMMA and MISC: remove it"
        )


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
    """Read ``word<TAB>tag`` lines, a blank line between sentences (as :func:`write_tagged` writes).

    Exactly two fields a line, both non-empty and kept as they are: a third field (a corpus
    with more columns, or a word holding a tab) is an error naming file and line, never folded
    into the tag, and so is a word or tag with whitespace at its start or end (:func:`check_tag`).
    """
    path = Path(path)
    check_regular_file(path, "tagged corpus file")
    sentences: list[Sentence] = []
    for block in file_blocks(path):
        sentence: Sentence = []
        for lineno, line in block:
            fields = line.split("\t")
            if len(fields) != 2 or not all(fields):
                found = (
                    f"{len(fields)} tab-separated fields"
                    if len(fields) > 2
                    else "an empty field"
                    if len(fields) == 2
                    else "no tab"
                )
                raise InnError(
                    f"{path}:{lineno}: expected 'word<TAB>tag', found {found}: {line!r}"
                    + (" (keep two columns: cut -f1,2 for a word and its tag)" if len(fields) > 2 else "")
                )
            check_tag(fields[0], f"{path}:{lineno}", "word")
            check_tag(fields[1], f"{path}:{lineno}")
            sentence.append((fields[0], fields[1]))
        sentences.append(sentence)
    return sentences
