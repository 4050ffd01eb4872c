"""Running text split into sentences: paragraphs at blank lines, then Punkt within each.

Sentences come from Punkt (:class:`nltk.tokenize.punkt.PunktSentenceTokenizer`, Kiss & Strunk
2006), the algorithm behind NLTK's ``sent_tokenize``, given the abbreviations of the model's
own training vocabulary (every word it saw that ends in a period, ``Mr.``, ``U.S.``, ``etc.``).
NLTK's pretrained English Punkt parameters (the ``punkt_tab`` data) are not used: they are a
separate download that NLTK does not ship, and a tagger's output should not depend on which
data a machine happens to have. A blank line always ends a sentence (a paragraph break); a
single line break is a space, as in the raw text files of UD releases, which wrap lines at 80
characters.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# every whitespace character as a space: a line break inside a paragraph is a space to every rule
SPACES = str.maketrans({c: " " for c in map(chr, range(0x3000 + 1)) if c.isspace()})
_BLANK_LINE = re.compile(r"\n[^\S\n]*\n\s*")


def abbreviations(words: Iterable[str]) -> set[str]:
    """The abbreviations among a vocabulary's words, as Punkt keeps them (lowercased, without the
    final period): every word of two or more characters that ends in a period and holds a letter
    (``Mr.`` -> ``mr``, ``U.S.`` -> ``u.s``, ``etc.`` -> ``etc``)."""
    return {w[:-1].lower() for w in words if len(w) > 1 and w.endswith(".") and any(c.isalpha() for c in w)}


def paragraphs(text: str) -> list[tuple[int, int]]:
    """The ``(start, end)`` spans of the blank-line-separated paragraphs of ``text``, surrounding
    whitespace left out."""
    spans, start = [], 0
    for match in [*_BLANK_LINE.finditer(text), None]:
        end = match.start() if match else len(text)
        chunk = text[start:end]
        if chunk.strip():
            lead = len(chunk) - len(chunk.lstrip())
            spans.append((start + lead, start + len(chunk.rstrip())))
        if match:
            start = match.end()
    return spans


class SentenceSplitter:
    """Punkt (:class:`nltk.tokenize.punkt.PunktSentenceTokenizer`) given ``abbreviations``
    (lowercased, without the final period, as :func:`abbreviations` gives them), within the
    paragraphs of a text."""

    def __init__(self, abbreviations: Iterable[str]) -> None:
        from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer

        params = PunktParameters()
        params.abbrev_types = set(abbreviations)
        self._punkt = PunktSentenceTokenizer(params)

    def spans(self, text: str) -> list[tuple[int, int, bool]]:
        """``(start, end, new_paragraph)`` of every sentence of ``text``. Punkt's sentences that
        no space separates (``wow!`` ``!``) are one."""
        spans: list[tuple[int, int, bool]] = []
        for p_start, p_end in paragraphs(text):
            first = True
            for s_start, s_end in self._punkt.span_tokenize(text[p_start:p_end].translate(SPACES)):
                start, end = p_start + s_start, p_start + s_end
                if not text[start:end].strip():
                    continue
                if not first and spans[-1][1] == start:
                    spans[-1] = (spans[-1][0], end, spans[-1][2])
                else:
                    spans.append((start, end, first))
                first = False
        return spans
