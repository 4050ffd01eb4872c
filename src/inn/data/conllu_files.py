"""CoNLL-U corpora (UD English EWT carries PTB tags in its XPOS column), parsed line by line
with the ``conllu`` package into sentences of ``(form, tag)``: multiword-token ranges and empty
nodes are skipped because they are not surface tokens of the tagging task; a malformed line, a
missing tag or a sentence without its closing blank line is an error naming file and line.
"""

from __future__ import annotations

import os
from pathlib import Path

from conllu.exceptions import ParseException
from conllu.parser import DEFAULT_FIELDS, parse_line

from inn.data.tagged import SPLITS, Sentence, check_tag
from inn.data.text_files import file_blocks
from inn.errors import InnError
from inn.io import check_regular_file

#: UD English EWT file names, by split.
EWT_FILES = {split: f"en_ewt-ud-{split}.conllu" for split in SPLITS}
_CONLLU_COLUMNS = len(DEFAULT_FIELDS)


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
    check_regular_file(path, "CoNLL-U file")
    sentences: list[Sentence] = []
    for block in file_blocks(path):
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
            except (ParseException, ValueError) as exc:
                raise InnError(f"{where}: malformed CoNLL-U line: {exc}") from None
            if not isinstance(token["id"], int):
                continue  # a multiword range (1-2) or an empty node (1.1): no surface token
            check_token_id(token["id"], len(sentence) + 1, where)
            tag = token[column]
            if tag in (None, "_"):
                other = "upos" if column == "xpos" else "xpos"
                raise InnError(
                    f"{where}: token {token['form']!r} has no {column.upper()} tag "
                    f"(read the {other.upper()} column instead: tags: {other})"
                )
            check_tag(tag, where, column.upper(), conllu=True)
            sentence.append((token["form"], tag))
        if sentence:
            sentences.append(sentence)
    if not sentences:
        raise InnError(f"{path}: no sentences in this CoNLL-U file")
    return sentences


def check_token_id(found: int, expected: int, where: str) -> None:
    """Stop unless ``found`` is ``expected``: a sentence's word IDs run 1, 2, 3, ... (CoNLL-U).
    A 1 in mid-sentence is a new sentence whose blank line is missing, any other break a
    repeated or skipped token."""
    if found == expected:
        return
    if found == 1:
        raise InnError(
            f"{where}: token ID 1 after token {expected - 1} of the same sentence: a blank line "
            "is missing before this sentence (CoNLL-U ends every sentence with one)"
        )
    problem = (
        "is not a word ID (they count from 1)"
        if found < 1
        else "repeats an earlier token's ID"
        if found < expected
        else f"skips ID {expected}"
    )
    raise InnError(f"{where}: malformed CoNLL-U line: token ID {found} {problem} (expected {expected})")


def read_ewt(root: str | os.PathLike) -> dict[str, list[Sentence]]:
    """Read UD English EWT's train/dev/test files from the folder ``root``."""
    root = Path(root)
    if not root.is_dir():
        raise InnError(
            f"UD English EWT folder not found: {root} "
            "(the workflow reads the files that corpora.ewt.train, .dev and .test name)"
        )
    return {split: read_conllu(root / name) for split, name in EWT_FILES.items()}
