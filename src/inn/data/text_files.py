"""Corpus text files read strictly: UTF-8 with or without a byte-order mark, plain or
gzip-compressed, as numbered lines and blank-line-separated blocks. Anything else is refused in
one line naming file and line rather than read as something it is not: text in UTF-16 or
UTF-32 (named as such), a byte that is not UTF-8, a carriage return inside a line, a damaged
gzip stream. Every line-based corpus reader (:mod:`inn.data.corpora`) and the tagger's
document reader (:mod:`inn.tagging.documents`) read through it.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterable, Iterator
from pathlib import Path

from inn.errors import InnError

#: the first bytes of a gzip stream (RFC 1952): such a corpus file is read decompressed
GZIP_MAGIC = b"\x1f\x8b"
_BOM = b"\xef\xbb\xbf"
#: the byte-order marks of the wide Unicode encodings (UTF-32's before UTF-16's, which they begin with)
_WIDE_BOMS = (
    (b"\xff\xfe\x00\x00", "UTF-32LE"),
    (b"\x00\x00\xfe\xff", "UTF-32BE"),
    (b"\xff\xfe", "UTF-16LE"),
    (b"\xfe\xff", "UTF-16BE"),
)
#: how much of a file's start :func:`wide_encoding` looks at
WIDE_SAMPLE = 4096


def wide_encoding(head: bytes) -> str | None:
    """The wide Unicode encoding (``UTF-16LE``, ``UTF-16BE``, ``UTF-32LE``, ``UTF-32BE``) that a
    file starting with ``head`` is written in, else None.

    Known by a byte-order mark, or without one by where the NUL bytes fall: text in a Latin or
    Greek script is in UTF-16 every other byte NUL, in UTF-32 three bytes of four. UTF-8 text
    holds no NUL bytes at all, and much of such a file would decode as UTF-8 with a NUL inside
    every word, so it is refused by name rather than read (or advised to convert from latin-1).
    """
    for bom, name in _WIDE_BOMS:
        if head.startswith(bom):
            return name
    sample = head[: len(head) // 4 * 4]
    if len(sample) < 4:
        return None

    def nul(start: int, step: int) -> float:
        column = sample[start::step]
        return column.count(0) / len(column)

    if nul(0, 4) < 0.05 and min(nul(1, 4), nul(2, 4), nul(3, 4)) > 0.3:
        return "UTF-32LE"
    if nul(3, 4) < 0.05 and min(nul(0, 4), nul(1, 4), nul(2, 4)) > 0.3:
        return "UTF-32BE"
    if nul(0, 2) < 0.05 and nul(1, 2) > 0.3:
        return "UTF-16LE"
    if nul(1, 2) < 0.05 and nul(0, 2) > 0.3:
        return "UTF-16BE"
    return None


def check_not_wide(head: bytes, source: str) -> None:
    """Stop if ``source``, starting with ``head``, is UTF-16 or UTF-32 text (:func:`wide_encoding`):
    one line naming the encoding and the conversion to UTF-8."""
    name = wide_encoding(head)
    if name is not None:
        order = "little" if name.endswith("LE") else "big"
        raise InnError(
            f"{source}: {name[:6]} text ({order}-endian), not UTF-8: convert it to UTF-8 first "
            f"(iconv -f {name} -t UTF-8)"
        )


def numbered_lines(path: Path) -> Iterator[tuple[int, str]]:
    r"""The lines of a UTF-8 text file, gzip-compressed or not, as (line number, text) pairs.

    A leading byte-order mark is not part of line 1, and a line ends in ``\n`` or ``\r\n``.
    Anything else is refused in one line rather than read as something it is not: UTF-16 or
    UTF-32 text (:func:`wide_encoding`), a byte that is not UTF-8 (named by its offset in the
    file, or in the decompressed text of a gzip file), a carriage return inside a line (old Mac
    line ends), a damaged gzip stream.
    """
    compressed = False
    try:
        with open(path, "rb") as raw:
            compressed = raw.read(2) == GZIP_MAGIC
        with (gzip.open if compressed else open)(path, "rb") as handle:
            check_not_wide(handle.read(WIDE_SAMPLE), str(path) + (" (decompressed)" if compressed else ""))
            handle.seek(0)
            offset = 0
            for lineno, data in enumerate(handle, start=1):
                start = len(_BOM) if lineno == 1 and data.startswith(_BOM) else 0
                try:
                    text = data[start:].decode("utf-8")
                except UnicodeDecodeError as exc:
                    at = f"byte {offset + start + exc.start}" + (" of the decompressed text" if compressed else "")
                    raise InnError(
                        f"{path}:{lineno}: {at} (0x{data[start + exc.start]:02x}) is not UTF-8: convert "
                        "the file to UTF-8 (e.g. iconv -f latin1 -t utf-8)"
                    ) from None
                offset += len(data)
                line = text[:-2] if text.endswith("\r\n") else text.removesuffix("\n")
                if "\r" in line:
                    raise InnError(
                        f"{path}:{lineno}: a carriage return inside the line: end lines with \\n or "
                        "\\r\\n (e.g. dos2unix)"
                    )
                yield lineno, line
    except (OSError, EOFError) as exc:  # gzip.BadGzipFile is an OSError
        if not compressed:
            raise InnError(f"cannot read {path}: {exc.strerror or exc}") from None
        raise InnError(f"{path}: damaged gzip file ({exc}): decompress a sound copy") from None


def is_blank(line: str) -> bool:
    """Whether ``line`` separates sentences: nothing on it but spaces and tabs."""
    return not line.strip(" \t")


def file_blocks(path: Path) -> Iterator[list[tuple[int, str]]]:
    """The blank-line-separated blocks of a text file (:func:`numbered_lines`), as (line number, line) pairs."""
    return blocks(numbered_lines(path))


def blocks(lines: Iterable[tuple[int, str]]) -> Iterator[list[tuple[int, str]]]:
    """The blocks of numbered ``lines`` between blank lines (:func:`is_blank`): the sentences of a
    CoNLL-U or tagged file, as (line number, line) pairs."""
    block: list[tuple[int, str]] = []
    for lineno, line in lines:
        if not is_blank(line):
            block.append((lineno, line))
        elif block:
            yield block
            block = []
    if block:
        yield block
