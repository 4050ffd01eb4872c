"""Scores of a tagged raw text against its gold CoNLL-U file, as the CoNLL 2018 shared task scores them.

The shared task's script (``conll18_ud_eval.py``, Zeman et al. 2018) compares a system's
CoNLL-U file with the gold one when both come from the same raw text but may split it into
different tokens, words and sentences. Its algorithm, reimplemented here for the columns a
tagger fills (no HEAD or DEPREL is needed, so a tagger's output is scored without a parse):

- both files are read as one character sequence, the concatenation of every token's FORM
  with the space characters (Unicode category Zs) inside a FORM removed; the two sequences
  must be equal (the same text), and every token, word and sentence is a span of it;
- **Tokens**: surface tokens (a multiword range such as ``1-2 I'm`` is one token, a word
  outside a range is one) match when their spans are equal; **Sentences** likewise;
- **Words**: syntactic words. Words outside multiword tokens align when their spans are equal.
  Where a multiword token lies on either side, the smallest stretch of words whose spans
  overlap it on both sides is aligned by the longest common subsequence of their FORMs
  (lowercased), so ``do`` / ``n't`` in ``don't`` align with the same words however the other
  side wrote the token;
- **UPOS**, **XPOS**: aligned words whose tag is equal.

Each score is precision = correct / system count, recall = correct / gold count and F1 =
2 correct / (gold + system), in percent; for tags also the accuracy over the aligned words
(``aligned_accuracy``). On gold tokens Words, Tokens and Sentences are 100 and tag F1 is the
token accuracy.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field
from typing import Any

from inn.errors import InnError

#: the scores :func:`evaluate` gives, in the shared task's order
METRICS = ("Tokens", "Sentences", "Words", "UPOS", "XPOS")
_FORM, _UPOS, _XPOS = 1, 3, 4


@dataclass(frozen=True)
class Span:
    """Characters ``[start, end)`` of the file's token characters (whitespace left out)."""

    start: int
    end: int


@dataclass(frozen=True, eq=False)
class UDWord:
    """A syntactic word: its token's span (shared by the words of a multiword token), FORM, tags."""

    span: Span
    form: str
    upos: str
    xpos: str
    is_multiword: bool


@dataclass
class UDFile:
    """A CoNLL-U file as the scorer sees it."""

    characters: str = ""
    tokens: list[Span] = field(default_factory=list)
    words: list[UDWord] = field(default_factory=list)
    sentences: list[Span] = field(default_factory=list)


@dataclass(frozen=True)
class Score:
    """One metric: counts and precision, recall, F1 (%); ``aligned_accuracy`` (%) for tags."""

    gold: int
    system: int
    correct: int
    aligned: int | None = None

    @property
    def precision(self) -> float:
        return 100.0 * self.correct / self.system if self.system else 0.0

    @property
    def recall(self) -> float:
        return 100.0 * self.correct / self.gold if self.gold else 0.0

    @property
    def f1(self) -> float:
        total = self.gold + self.system
        return 200.0 * self.correct / total if total else 0.0

    @property
    def aligned_accuracy(self) -> float | None:
        return 100.0 * self.correct / self.aligned if self.aligned else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "gold": self.gold,
            "system": self.system,
            "correct": self.correct,
            "aligned": self.aligned,
            "precision": self.precision,
            "recall": self.recall,
            "f1": self.f1,
            "aligned_accuracy": self.aligned_accuracy,
        }


def _no_spaces(form: str) -> str:
    return "".join(c for c in form if unicodedata.category(c) != "Zs")


def read_ud(text: str, source: str = "<text>") -> UDFile:
    """A CoNLL-U text as :class:`UDFile` (comments and empty nodes skipped).

    Raises:
        InnError: a line without ten tab-separated fields, a bad ID, a multiword range not
            followed by its words, or an empty FORM (naming ``source:line``).
    """
    ud = UDFile()
    characters: list[str] = []
    lines = text.replace("\r\n", "\n").removeprefix("\ufeff").split("\n")
    index, sentence_start = 0, None
    number = 0

    def fields(line: str, number: int) -> list[str]:
        columns = line.split("\t")
        if len(columns) != 10:
            raise InnError(f"{source}:{number}: expected 10 tab-separated CoNLL-U fields, found {len(columns)}")
        return columns

    while number < len(lines):
        line = lines[number]
        number += 1
        if sentence_start is None:
            if line.startswith("#") or not line.strip():
                continue
            ud.sentences.append(Span(index, index))
            sentence_start = len(ud.words)
        if not line.strip():
            ud.sentences[-1] = Span(ud.sentences[-1].start, index)
            sentence_start = None
            continue
        if line.startswith("#"):
            continue
        columns = fields(line, number)
        if "." in columns[0]:
            continue  # an empty node: no characters, no word
        form = _no_spaces(columns[_FORM])
        if not form:
            raise InnError(f"{source}:{number}: an empty FORM")
        characters.append(form)
        span = Span(index, index + len(form))
        ud.tokens.append(span)
        index += len(form)
        if "-" in columns[0]:
            try:
                first, last = map(int, columns[0].split("-"))
            except ValueError:
                raise InnError(f"{source}:{number}: cannot read the multiword range {columns[0]!r}") from None
            if last < first:
                raise InnError(f"{source}:{number}: the multiword range {columns[0]!r} runs backwards")
            for _ in range(first, last + 1):
                if number >= len(lines) or not lines[number].strip():
                    raise InnError(
                        f"{source}:{number}: the multiword range {columns[0]!r} is not followed by its words"
                    )
                word = fields(lines[number], number + 1)
                number += 1
                ud.words.append(UDWord(span, word[_FORM], word[_UPOS], word[_XPOS], True))
        else:
            if not columns[0].isdigit() or int(columns[0]) != len(ud.words) - sentence_start + 1:
                raise InnError(
                    f"{source}:{number}: word ID {columns[0]!r} out of order (expected "
                    f"{len(ud.words) - sentence_start + 1}; a blank line missing between sentences?)"
                )
            ud.words.append(UDWord(span, columns[_FORM], columns[_UPOS], columns[_XPOS], False))
    if sentence_start is not None:
        ud.sentences[-1] = Span(ud.sentences[-1].start, index)
    ud.characters = "".join(characters)
    return ud


def _spans_score(gold: list[Span], system: list[Span]) -> Score:
    correct, g, s = 0, 0, 0
    while g < len(gold) and s < len(system):
        if system[s].start < gold[g].start:
            s += 1
        elif gold[g].start < system[s].start:
            g += 1
        else:
            correct += gold[g].end == system[s].end
            g += 1
            s += 1
    return Score(len(gold), len(system), correct)


def _beyond_end(words: list[UDWord], i: int, end: int) -> bool:
    if i >= len(words):
        return True
    if words[i].is_multiword:
        return words[i].span.start >= end
    return words[i].span.end > end


def _extend_end(word: UDWord, end: int) -> int:
    return word.span.end if word.is_multiword and word.span.end > end else end


def _multiword_span(gold: list[UDWord], system: list[UDWord], g: int, s: int) -> tuple[int, int, int, int]:
    """The smallest stretch ``gold[gs:g]``, ``system[ss:s]`` around a multiword token at ``g`` or ``s``."""
    if gold[g].is_multiword:
        end = gold[g].span.end
        if not system[s].is_multiword and system[s].span.start < gold[g].span.start:
            s += 1
    else:
        end = system[s].span.end
        if not gold[g].is_multiword and gold[g].span.start < system[s].span.start:
            g += 1
    gs, ss = g, s
    while not _beyond_end(gold, g, end) or not _beyond_end(system, s, end):
        if g < len(gold) and (s >= len(system) or gold[g].span.start <= system[s].span.start):
            end = _extend_end(gold[g], end)
            g += 1
        else:
            end = _extend_end(system[s], end)
            s += 1
    return gs, ss, g, s


def align_words(gold: list[UDWord], system: list[UDWord]) -> list[tuple[UDWord, UDWord]]:
    """The (gold, system) word pairs the shared task aligns (see the module docstring)."""
    pairs: list[tuple[UDWord, UDWord]] = []
    g, s = 0, 0
    while g < len(gold) and s < len(system):
        if gold[g].is_multiword or system[s].is_multiword:
            gs, ss, g, s = _multiword_span(gold, system, g, s)
            if g > gs and s > ss:
                a = [w.form.lower() for w in gold[gs:g]]
                b = [w.form.lower() for w in system[ss:s]]
                # lcs[i][j]: the longest common subsequence of a[i:] and b[j:]
                lcs = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
                for i in reversed(range(len(a))):
                    for j in reversed(range(len(b))):
                        lcs[i][j] = 1 + lcs[i + 1][j + 1] if a[i] == b[j] else max(lcs[i + 1][j], lcs[i][j + 1])
                i = j = 0
                while i < len(a) and j < len(b):
                    if a[i] == b[j]:
                        pairs.append((gold[gs + i], system[ss + j]))
                        i += 1
                        j += 1
                    elif lcs[i][j] == lcs[i + 1][j]:
                        i += 1
                    else:
                        j += 1
        elif gold[g].span == system[s].span:
            pairs.append((gold[g], system[s]))
            g += 1
            s += 1
        elif gold[g].span.start <= system[s].span.start:
            g += 1
        else:
            s += 1
    return pairs


def evaluate(gold: UDFile, system: UDFile) -> dict[str, Score]:
    """Tokens, Sentences, Words, UPOS and XPOS scores of ``system`` against ``gold``.

    Raises:
        InnError: the two files are not the same text (naming where they first differ).
    """
    if gold.characters != system.characters:
        i = 0
        while i < min(len(gold.characters), len(system.characters)) and gold.characters[i] == system.characters[i]:
            i += 1
        raise InnError(
            f"the system file's tokens spell another text than the gold file's from character {i} "
            f"(gold {gold.characters[i : i + 20]!r}, system {system.characters[i : i + 20]!r}): "
            "tag the gold file's own text (inn conllu-text GOLD)"
        )
    pairs = align_words(gold.words, system.words)
    n_gold, n_system = len(gold.words), len(system.words)
    return {
        "Tokens": _spans_score(gold.tokens, system.tokens),
        "Sentences": _spans_score(gold.sentences, system.sentences),
        "Words": Score(n_gold, n_system, len(pairs)),
        "UPOS": Score(n_gold, n_system, sum(g.upos == s.upos for g, s in pairs), len(pairs)),
        "XPOS": Score(n_gold, n_system, sum(g.xpos == s.xpos for g, s in pairs), len(pairs)),
    }


def score_texts(gold: str, system: str, gold_source: str = "gold", system_source: str = "system") -> dict[str, Score]:
    """:func:`evaluate` on two CoNLL-U texts."""
    return evaluate(read_ud(gold, gold_source), read_ud(system, system_source))


def gives_tags(ud: UDFile, column: str) -> bool:
    """Whether any word of ``ud`` has a tag in ``column`` ("UPOS" or "XPOS"), not ``_``."""
    attribute = column.lower()
    return any(getattr(word, attribute) != "_" for word in ud.words)


def unscored(gold: UDFile, system: UDFile) -> dict[str, str]:
    """The tag metrics that two files cannot score, each with why.

    The shared task's script counts an aligned word as right when its two tags are equal, ``_``
    included, so a column that either file leaves empty still gets a row: ``_`` against ``_``
    scores as the Words row (a UPOS tagger's XPOS against a treebank without XPOS, such as
    French GSD), tags against ``_`` as 0 (an XPOS tagger's UPOS, or the files given in the
    wrong order). Such a row measures nothing; this names it (:func:`gives_tags` tells which file
    lacks the column).
    """
    reasons = {}
    for column in ("UPOS", "XPOS"):
        in_gold, in_system = gives_tags(gold, column), gives_tags(system, column)
        if in_gold and not in_system:
            reasons[column] = f"the system file gives no {column} (every word's is _): its row is 0 by construction"
        elif in_system and not in_gold:
            reasons[column] = f"the gold file gives no {column} (every word's is _): its row is 0 by construction"
        elif not in_gold:
            reasons[column] = f"neither file gives {column}: its row counts _ against _, the Words row again"
    return reasons
