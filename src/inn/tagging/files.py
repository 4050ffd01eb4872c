"""The input files of the tagging commands (``inn tag``, ``benchmark-tagger``, ``score-text``):
their bytes (stdin for none or ``-``), their sentences in the form each was read as, and a
CoNLL-U file to score as text (plain or gzip-compressed). An unreadable file is one line that
names it.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path

from inn.errors import InnError
from inn.io import read_stdin
from inn.tagging.documents import TextSentence, decode, read_text


def input_bytes(files: list[str]) -> Iterator[tuple[bytes, str]]:
    """(bytes, source name) of each of ``files``, stdin for none or ``-``; an unreadable one is
    one line naming it."""
    for name in files or ["-"]:
        if name == "-":
            yield read_stdin(), "<stdin>"
            continue
        try:
            yield Path(name).read_bytes(), name
        except OSError as exc:
            raise InnError(f"cannot read {name}: {exc.strerror or exc}") from None


def read_inputs(files: list[str], form: str) -> tuple[list[tuple[TextSentence, str]], list[str]]:
    """Every sentence of ``files`` (stdin for none or ``-``) with its source, and the form
    each file was read as."""
    sentences: list[tuple[TextSentence, str]] = []
    forms = []
    for data, source in input_bytes(files):
        read, used = read_text(data, source, form)
        sentences += [(s, source) for s in read]
        forms.append(used)
    return sentences, forms


def read_conllu_file(path: str, flag: str) -> str:
    """A CoNLL-U file to score, plain or gzip-compressed, as text (UTF-8, byte-order mark and
    ``\\r\\n`` handled by :func:`inn.tagging.documents.decode`)."""
    try:
        data = Path(path).read_bytes()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
    except (OSError, EOFError) as exc:
        raise InnError(f"cannot read {flag} {path}: {getattr(exc, 'strerror', None) or exc}") from None
    return decode(data, path)
