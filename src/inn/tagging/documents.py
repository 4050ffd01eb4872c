"""Text to tag, read and written line for line: CoNLL-U, horizontal and vertical.

The training reader (:func:`inn.data.corpora.read_conllu`) keeps only ``(form, tag)`` pairs;
a tagger must give back everything it was given. Here a CoNLL-U sentence keeps every line
(comments, multiword-token ranges, empty nodes, every column), and only the one tag column of
its syntactic words is replaced on output. Three input forms:

- ``conllu``: CoNLL-U; the syntactic words (integer IDs) are what is tagged;
- ``horizontal``: one sentence per line, tokens separated by spaces;
- ``vertical``: one token per line (its first tab-separated field), a blank line between
  sentences.

and three output forms: ``conllu`` (from any input; other input gets minimal CoNLL-U lines),
``horizontal`` (``word_TAG`` separated by spaces) and ``vertical`` (``word<TAB>TAG``).

Input is bytes that must be UTF-8 (a leading byte-order mark is dropped); errors name the
source and the line, or the byte offset of text that is not UTF-8.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from inn.data.conllu_files import check_token_id
from inn.data.tagged import check_tag
from inn.data.text_files import WIDE_SAMPLE, blocks, check_not_wide
from inn.errors import InnError
from inn.tagging.tokenize import RawSentence

log = logging.getLogger(__name__)

INPUT_FORMATS = ("conllu", "horizontal", "vertical")
OUTPUT_FORMATS = ("conllu", "horizontal", "vertical")
#: the ten CoNLL-U columns, in order
CONLLU_FIELDS = ("id", "form", "lemma", "upos", "xpos", "feats", "head", "deprel", "deps", "misc")
_WORD_ID = re.compile(r"[1-9]\d*")
_RANGE_ID = re.compile(r"[1-9]\d*-[1-9]\d*")
_EMPTY_ID = re.compile(r"(0|[1-9]\d*)\.[1-9]\d*")


@dataclass
class TextSentence:
    """One sentence to tag: its words, and for CoNLL-U input every line it came with.

    ``lines`` holds the sentence's lines split into fields (a comment is one field);
    ``word_lines[i]`` is the index in ``lines`` of word ``i``; ``line_numbers[i]`` the input
    line of word ``i`` (for messages). For horizontal and vertical input ``lines`` is empty.
    """

    words: list[str]
    lines: list[list[str]] = field(default_factory=list)
    word_lines: list[int] = field(default_factory=list)
    line_numbers: list[int] = field(default_factory=list)

    def column(self, name: str) -> list[str]:
        """The CoNLL-U column ``name`` of the syntactic words (``"_"`` where empty)."""
        index = CONLLU_FIELDS.index(name)
        return [self.lines[i][index] for i in self.word_lines]


def decode(data: bytes, source: str) -> str:
    """``data`` as text: UTF-8, a leading byte-order mark dropped, line ends normalised.

    Raises:
        InnError: ``data`` is not UTF-8 (naming ``source`` and the byte offset; UTF-16 and
            UTF-32 by name, :func:`inn.data.text_files.wide_encoding`).
    """
    check_not_wide(data[:WIDE_SAMPLE], source)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = data[exc.start : exc.start + 4]
        raise InnError(
            f"{source}: not UTF-8 text (byte offset {exc.start}: {bad!r}); convert it to UTF-8 first, "
            f"e.g. iconv -f latin1 -t utf-8"
        ) from None
    text = text.removeprefix("\ufeff").replace("\r\n", "\n")
    if "\r" in text:  # lone carriage returns (old Mac line ends) would merge lines into one
        line = text.count("\n", 0, text.index("\r")) + 1
        raise InnError(
            f"{source}:{line}: a carriage return inside the line: end lines with \\n or \\r\\n "
            "(e.g. tr '\\r' '\\n' < in > out)"
        )
    return text


def looks_like_conllu(text: str) -> bool:
    """Whether the first line that is neither blank nor a ``#`` comment is a ten-column token
    line, so that a plain sentence starting with ``#`` is not taken for a CoNLL-U comment."""
    for line in text.split("\n"):
        if line.strip() and not line.startswith("#"):
            fields = line.split("\t")
            return len(fields) == len(CONLLU_FIELDS) and fields[0][:1].isdigit()
    return False


_GLUED = re.compile(r"^[^\W\d_]{2,}[,;:!?)\]]$|^[(\[\"][^\W\d_]{2,}|^[a-z]{2,}\.$")


def contradiction(text: str, form: str) -> str | None:
    """Why ``text`` does not look like the ``form`` it is declared to be, or ``None``:

    - CoNLL-U token lines (ten tab-separated fields from an ID) read as horizontal, vertical or
      running text, whose comments and columns would be tagged as words;
    - horizontal text whose words carry punctuation (``America:``, ``them.``, ``(see``; more than
      3% of them): running text, which ``--input text`` splits;
    - vertical text whose lines hold several words (most lines three or more): a sentence a line.
    """
    lines = [(n, line) for n, line in enumerate(text.split("\n"), start=1) if line.strip()]
    if form != "conllu":
        for n, line in lines:
            fields = line.split("\t")
            if len(fields) == len(CONLLU_FIELDS) and (_WORD_ID.fullmatch(fields[0]) or _RANGE_ID.fullmatch(fields[0])):
                return (
                    f"line {n} is a CoNLL-U token line (10 tab-separated fields), but the input is read as "
                    f"--input {form}: its comment lines and columns are tagged as words; give --input conllu"
                )
    if form == "horizontal":
        words = [w for _, line in lines for w in line.split()]
        glued = [w for w in words if _GLUED.match(w)]
        if words and len(glued) > 0.03 * len(words):
            examples = ", ".join(repr(w) for w in dict.fromkeys(glued[:20]).keys())
            return (
                f"{len(glued) / len(words):.0%} of its words carry punctuation ({examples}...): it looks like "
                "running text, read here as words split at spaces; give --input text to split it into words"
            )
    if form == "vertical":
        long = [n for n, line in lines if len(line.split("\t")[0].split()) >= 3]
        if lines and len(long) > 0.5 * len(lines):
            return (
                f"{len(long)} of its {len(lines)} lines hold three or more words (line {long[0]}), but --input "
                "vertical reads a word a line; give --input horizontal (a sentence a line) or --input text"
            )
    return None


def _blocks(text: str) -> Iterable[list[tuple[int, str]]]:
    """The blank-line-separated blocks of ``text`` as (line number, line) pairs."""
    return blocks(enumerate(text.split("\n"), start=1))


def read_conllu_text(text: str, source: str) -> list[TextSentence]:
    """The sentences of CoNLL-U ``text`` with every line kept.

    Raises:
        InnError: a line without ten tab-separated fields, with an ID that is neither a word
            index, a range nor an empty node, with word IDs that do not run 1, 2, 3, ... (a
            missing blank line between sentences), without a form, or with whitespace in its
            UPOS or XPOS (naming ``source:line``).
    """
    sentences = []
    for block in _blocks(text):
        sentence = TextSentence(words=[])
        for number, line in block:
            if line.startswith("#"):
                sentence.lines.append([line])
                continue
            fields = line.split("\t")
            where = f"{source}:{number}"
            if len(fields) != len(CONLLU_FIELDS):
                raise InnError(
                    f"{where}: malformed CoNLL-U line: expected {len(CONLLU_FIELDS)} tab-separated "
                    f"fields, found {len(fields)}"
                )
            token_id = fields[0]
            for column in ("upos", "xpos"):  # the tags scored and replaced: "NN " is no NN
                check_tag(fields[CONLLU_FIELDS.index(column)], where, column.upper(), conllu=True)
            if _WORD_ID.fullmatch(token_id):
                check_token_id(int(token_id), len(sentence.words) + 1, where)
                if not fields[1]:
                    raise InnError(f"{where}: malformed CoNLL-U line: word {token_id} has an empty FORM")
                sentence.word_lines.append(len(sentence.lines))
                sentence.line_numbers.append(number)
                sentence.words.append(fields[1])
            elif not (_RANGE_ID.fullmatch(token_id) or _EMPTY_ID.fullmatch(token_id)):
                raise InnError(
                    f"{where}: malformed CoNLL-U line: ID {token_id!r} is not a word index (3), "
                    "a multiword range (3-4) or an empty node (3.1)"
                )
            sentence.lines.append(fields)
        sentences.append(sentence)
    return sentences


def read_plain_text(text: str, form: str) -> list[TextSentence]:
    """Sentences of horizontal text (a sentence a line, tokens split at spaces; a blank line is
    an empty sentence, so horizontal output keeps the lines) or vertical text (a token a line,
    its first tab-separated field; a blank line ends a sentence)."""
    if form == "horizontal":  # a blank line is an empty sentence: output lines match input lines
        return [TextSentence(words=line.split()) for line in text.removesuffix("\n").split("\n")] if text else []
    return [TextSentence(words=[line.split("\t")[0].strip() for _, line in block]) for block in _blocks(text)]


def read_text(data: bytes, source: str, form: str = "auto") -> tuple[list[TextSentence], str]:
    """Sentences of ``data`` in ``form``; returns them and the form read.

    ``auto``: CoNLL-U when it looks like it (:func:`looks_like_conllu`) or ``source`` ends in
    ``.conllu`` (then its malformed lines are named, not read as words), else horizontal text;
    input with tabs that is not CoNLL-U (a vertical ``word<TAB>tag`` file) is refused rather
    than read as sentences whose words are the columns. Input that does not look like its form
    is named in a warning (:func:`contradiction`)."""
    text = decode(data, source)
    if form == "auto":
        form = "conllu" if looks_like_conllu(text) or source.endswith((".conllu", ".conllu.gz")) else "horizontal"
        if form == "horizontal" and "\t" in text:  # tab-separated columns are no sentence of words
            line = text.count("\n", 0, text.index("\t")) + 1
            raise InnError(
                f"{source}:{line}: tab-separated fields, but not a CoNLL-U token line (10 fields "
                "starting with an ID): give --input vertical for word<TAB>... lines, --input conllu "
                "to have a CoNLL-U file checked line by line, or --input horizontal for tabs as spaces"
            )
    if form not in INPUT_FORMATS:
        raise InnError(f"unknown input format {form!r}: use auto, {', '.join(INPUT_FORMATS)}")
    why = contradiction(text, form)
    if why:
        log.warning("%s: %s", source, why)
    if form != "conllu":
        return read_plain_text(text, form), form
    return read_conllu_text(text, source), form


def write_text(
    sentences: Sequence[TextSentence], tags: Sequence[Sequence[str]], form: str, column: str = "xpos"
) -> str:
    """The tagged sentences as text in ``form``; for CoNLL-U ``column`` receives the tags.

    CoNLL-U input comes back line for line with only that column of its syntactic words
    changed (a block of comments alone too); other input gets one line per word (ID, FORM, the
    tag; ``_`` elsewhere).
    """
    if form not in OUTPUT_FORMATS:
        raise InnError(f"unknown output format {form!r}: use {', '.join(OUTPUT_FORMATS)}")
    out: list[str] = []
    index = CONLLU_FIELDS.index(column)
    for sentence, sentence_tags in zip(sentences, tags):
        if not sentence.words and not (form == "horizontal" or (form == "conllu" and sentence.lines)):
            continue  # no words: kept as a blank line (horizontal) or as its CoNLL-U lines (comments alone)
        if form == "horizontal":
            out.append(" ".join(f"{w}_{t}" for w, t in zip(sentence.words, sentence_tags)) + "\n")
        elif form == "vertical":
            out.append("".join(f"{w}\t{t}\n" for w, t in zip(sentence.words, sentence_tags)) + "\n")
        else:
            if sentence.lines:
                lines = [list(fields) for fields in sentence.lines]
                for line, tag in zip(sentence.word_lines, sentence_tags):
                    lines[line][index] = tag
            else:
                lines = []
                for i, (word, tag) in enumerate(zip(sentence.words, sentence_tags), start=1):
                    fields = [str(i), word] + ["_"] * (len(CONLLU_FIELDS) - 2)
                    fields[index] = tag
                    lines.append(fields)
            out.append("".join("\t".join(fields) + "\n" for fields in lines) + "\n")
    return "".join(out)


def conllu_to_text(text: str, source: str = "<text>", width: int = 80) -> str:
    """The raw text of CoNLL-U ``text``, as the UD tools' ``conllu_to_text.pl`` writes a
    release's ``.txt`` files: the sentences' ``# text`` (else their tokens joined as their
    ``SpaceAfter=No`` says), a space between the sentences of a paragraph, a blank line before
    each ``# newpar`` and ``# newdoc``, lines broken at a space once they reach ``width``
    characters (0: no breaks).

    Raises:
        InnError: malformed CoNLL-U (:func:`read_conllu_text`).
    """
    out: list[str] = []
    buffer = ""

    def flush(buffer: str, final: bool) -> str:
        while width and len(buffer) >= width:
            spaces = [i for i, c in enumerate(buffer) if c == " "]
            cut = max((i for i in spaces if i <= width), default=None)
            cut = cut if cut is not None else next((i for i in spaces if i > width), None)
            if cut is None:
                break
            out.append(buffer[:cut] + "\n")
            buffer = buffer[cut + 1 :]
        if final and buffer:
            out.append(buffer + "\n")
            buffer = ""
        return buffer

    for n, sentence in enumerate(read_conllu_text(text, source)):
        comments = [fields[0] for fields in sentence.lines if len(fields) == 1]
        if n and any(re.match(r"#\s*new(par|doc)(\s|$)", c) for c in comments):
            buffer = flush(buffer, final=True)
            out.append("\n")
        said = [c for c in comments if re.match(r"#\s*text\s*=", c)]
        if said:
            sentence_text = said[0].split("=", 1)[1].strip()
        else:
            sentence_text = "".join(
                fields[1] + ("" if "SpaceAfter=No" in fields[9].split("|") else " ")
                for fields in sentence.lines
                if len(fields) > 1 and "." not in fields[0] and not _inside_range(sentence, fields)
            )
            sentence_text = sentence_text.strip()
        buffer = (buffer + " " + sentence_text) if buffer else sentence_text
        buffer = flush(buffer, final=False)
    flush(buffer, final=True)
    return "".join(out)


def _inside_range(sentence: TextSentence, fields: list[str]) -> bool:
    """Whether a word line lies inside one of the sentence's multiword ranges (its surface
    form is the range line's)."""
    if not _WORD_ID.fullmatch(fields[0]):
        return False
    i = int(fields[0])
    for line in sentence.lines:
        if len(line) > 1 and _RANGE_ID.fullmatch(line[0]):
            first, last = map(int, line[0].split("-"))
            if first <= i <= last:
                return True
    return False


def raw_to_conllu(sentences: Sequence[RawSentence], first_id: int = 1, doc_id: str | None = None) -> list[TextSentence]:
    """Tokenized running text (:meth:`inn.tagging.tokenize.Tokenizer.split`) as CoNLL-U sentences
    that keep it recoverable: ``# newdoc`` (with ``doc_id``) before the first, ``# newpar`` where
    a paragraph starts, ``# sent_id`` (numbered from ``first_id``), ``# text``, a multiword range
    line (``1-2 I'm``) before the words of each multiword token, and ``SpaceAfter=No`` in MISC
    of every token that no space follows (on the range line for a multiword token).

    The words of each :class:`TextSentence` are their forms as written; its tag column is
    filled by :func:`write_text`.
    """
    out = []
    blank = ["_"] * (len(CONLLU_FIELDS) - 2)
    for n, raw in enumerate(sentences):
        lines: list[list[str]] = []
        if n == 0 and doc_id is not None:
            lines.append([f"# newdoc id = {doc_id}" if doc_id else "# newdoc"])
        if raw.new_paragraph:
            lines.append(["# newpar"])
        lines += [[f"# sent_id = {first_id + n}"], [f"# text = {raw.text}"]]
        sentence = TextSentence(words=[], lines=lines)
        for token in raw.tokens:
            misc = "_" if token.space_after else "SpaceAfter=No"
            first = len(sentence.words) + 1
            if len(token.words) > 1:
                lines.append([f"{first}-{first + len(token.words) - 1}", token.form, *blank[:-1], misc])
            for i, word in enumerate(token.words):
                sentence.word_lines.append(len(lines))
                sentence.line_numbers.append(0)
                sentence.words.append(word.form)
                lines.append([str(first + i), word.form, *blank[:-1], misc if len(token.words) == 1 else "_"])
        out.append(sentence)
    return out
