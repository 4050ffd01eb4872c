"""Part-of-speech corpora in one normalised form: a list of sentences of ``(word, tag)``.

Four formats, one shape:

- :func:`read_ptb`: the WSJ part of an LDC Penn Treebank 3 copy (licensed, never shipped),
  by section; trace tokens (tag ``-NONE-``) removed.
- :func:`read_treebank_sample`: NLTK's free 199-file WSJ sample, read with NLTK's own corpus
  reader and split by file: wsj_0001-0139 train, 0140-0169 dev, 0170-0199 test (3,068 / 433 /
  413 sentences once -NONE- tokens are removed).
- :func:`read_conllu`: a CoNLL-U file (UD English EWT carries PTB tags in its XPOS column),
  parsed line by line with the ``conllu`` package; multiword-token ranges and empty nodes are
  skipped because they are not surface tokens of the tagging task.
- :func:`read_tagged`: two tab-separated columns, ``word<TAB>tag``, a blank line between
  sentences (also the form :func:`write_tagged` stores prepared splits in).

:func:`read_corpus` dispatches on the corpus format the workflow's config names. Text files
are read strictly, as UTF-8 with or without a byte-order mark, plain or gzip-compressed: a
byte that is not UTF-8, a line of the wrong shape or a CoNLL-U sentence without its closing
blank line is an error naming file and line, never a silently different sentence; so is a tag
with whitespace at its start or end (``NN `` would be a tag class beside ``NN``), and text in
UTF-16 or UTF-32, named as such.
"""

from __future__ import annotations

import gzip
import logging
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from conllu.exceptions import ParseException
from conllu.parser import DEFAULT_FIELDS, parse_line

from inn.errors import InnError
from inn.io import atomic_open, check_distinct_splits, check_regular_file

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


def _lines(path: Path) -> Iterator[tuple[int, str]]:
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


def _blank(line: str) -> bool:
    """Whether ``line`` separates sentences: nothing on it but spaces and tabs."""
    return not line.strip(" \t")


def _blocks(path: Path) -> Iterator[list[tuple[int, str]]]:
    """The blank-line-separated blocks of a text file (:func:`_lines`), as (line number, line) pairs."""
    return blocks(_lines(path))


def blocks(lines: Iterable[tuple[int, str]]) -> Iterator[list[tuple[int, str]]]:
    """The blocks of numbered ``lines`` between blank lines (:func:`_blank`): the sentences of a
    CoNLL-U or tagged file, as (line number, line) pairs."""
    block: list[tuple[int, str]] = []
    for lineno, line in lines:
        if not _blank(line):
            block.append((lineno, line))
        elif block:
            yield block
            block = []
    if block:
        yield block


def has_tokens(path: str | os.PathLike, format: str) -> bool:
    """Whether a ``conllu`` or ``tsv`` corpus file holds a token line, read only up to the first
    one (cheap on a file of any size), so that an empty split is found before any work.

    Raises:
        InnError: ``path`` is a folder or missing, or its lines up to the first token are unreadable.
    """
    path = Path(path)
    check_regular_file(path, f"{format} corpus file")
    return any(not _blank(line) and not (format == "conllu" and line.startswith("#")) for _, line in _lines(path))


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
    check_regular_file(path, "CoNLL-U file")
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
    """Read ``word<TAB>tag`` lines, a blank line between sentences (as :func:`write_tagged` writes).

    Exactly two fields a line, both non-empty and kept as they are: a third field (a corpus
    with more columns, or a word holding a tab) is an error naming file and line, never folded
    into the tag, and so is a word or tag with whitespace at its start or end (:func:`check_tag`).
    """
    path = Path(path)
    check_regular_file(path, "tagged corpus file")
    sentences: list[Sentence] = []
    for block in _blocks(path):
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
