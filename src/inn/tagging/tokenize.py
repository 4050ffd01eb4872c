"""Running text to the words a tagger was trained on: sentences, tokens and words with their offsets.

A tagger reads words as its corpus wrote them, so raw text is split the corpus's way. Two
conventions for English, chosen by the corpus format a tagger file records:

- ``ud`` (Universal Dependencies English, e.g. EWT, GUM; any CoNLL-U or tsv corpus): words are
  written as in the text: brackets ``(``, quotes ``"`` “ ” and apostrophes ’ as they stand.
  Clitics are words of their own inside one surface token, a CoNLL-U multiword token
  (``I'm`` = ``I`` + ``'m``, ``don't`` = ``do`` + ``n't``, ``cannot``, ``gonna``, the
  possessive ``'s`` and ``s'``, and a few apostrophe-less spellings such as ``dont``). Hyphens
  between letters are split off (``search-engine`` = ``search`` ``-`` ``engine``, as EWT
  writes them) unless the model's vocabulary holds the whole word (``e-mail``, ``co-workers``)
  or its first part is a prefix UD English keeps attached (``non-``, ``pre-``, ``re-``...);
  runs of ``!`` ``?`` ``.`` stay one token (``!!!``, ``?!``).
- ``ptb`` (the Penn Treebank: WSJ, NLTK's sample): brackets are escaped (``-LRB-``,
  ``-RCB-``...), double quotes become ``````/``''`` by their side, and clitics are separate
  tokens. The escape is only what the model reads (:attr:`Word.model_form`): every word's
  :attr:`Word.form` is the text as written, so output keeps the text recoverable.

Sentences come from Punkt given the abbreviations of the model's own training vocabulary
(:mod:`inn.tagging.sentences`); a blank line always ends one.

Words within a sentence come from NLTK's Treebank tokenizer
(:class:`nltk.tokenize.TreebankWordTokenizer`), the Penn Treebank's own rules (Robert
MacIntyre's sed script) kept by NLTK and run offline, on a copy of the sentence whose curly
quotes read as straight ones, whose line breaks and tabs read as spaces (the Treebank rules for
clitics need a space after them) and whose URLs and e-mail addresses are masked, so that its
offsets are the text's; the rules above then adapt its split to the convention.

Languages: English only (:data:`TOKENIZERS`); :func:`tokenizer_for` refuses another by name.
The rules' word lists and patterns are :mod:`inn.tagging.english`'s.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from inn.errors import InnError
from inn.tagging.english import (
    ABBREVIATIONS,
    APOSTROPHES,
    BARE_CONTRACTIONS,
    CLITIC,
    DOTS,
    FINAL_PERIOD,
    HYPHENATED,
    JOINED_CONTRACTIONS,
    KEPT_PREFIXES,
    PROTECTED,
    QUOTES,
    SECOND_HALVES,
    SLASHED,
    join_runs,
    ptb_escapes,
    split_at,
)
from inn.tagging.english import PTB_ESCAPES as PTB_ESCAPES
from inn.tagging.sentences import SPACES, SentenceSplitter, abbreviations

log = logging.getLogger(__name__)

CONVENTIONS = ("ud", "ptb")
#: language code -> what tokenizes it
TOKENIZERS: dict[str, Callable[..., Tokenizer]] = {}
_NON_SPACE = re.compile(r"\S+")


@dataclass(frozen=True)
class Word:
    """A syntactic word: ``form`` is the text as written, ``text[start:end]``; ``model_form`` is
    what the tagger reads (the corpus's spelling: ``-LRB-`` for ``(`` in a Penn Treebank
    corpus; the form itself in a UD one)."""

    form: str
    start: int
    end: int
    model_form: str


@dataclass
class Token:
    """A surface token: one word, or the words of a multiword token (``I'm`` = ``I`` + ``'m``).
    ``space_after``: whether whitespace (or the end of the text) follows it."""

    words: list[Word]
    space_after: bool = True

    @property
    def start(self) -> int:
        return self.words[0].start

    @property
    def end(self) -> int:
        return self.words[-1].end

    @property
    def form(self) -> str:
        return "".join(word.form for word in self.words)


@dataclass
class RawSentence:
    """A sentence of running text: its tokens, its text (whitespace runs as one space, as
    CoNLL-U's ``# text`` writes it), whether it starts a paragraph, and, once tagged, one tag
    per word (:meth:`inn.tagging.tagger.Tagger.tag_text`)."""

    tokens: list[Token]
    text: str
    new_paragraph: bool = False
    tags: list[str] = field(default_factory=list)

    @property
    def words(self) -> list[Word]:
        return [word for token in self.tokens for word in token.words]

    @property
    def start(self) -> int:
        return self.tokens[0].start

    @property
    def end(self) -> int:
        return self.tokens[-1].end


class Tokenizer:
    """Sentence splitting and tokenization of English running text (see the module docstring).

    Args:
        convention: ``ud`` or ``ptb``.
        vocabulary: the words the model saw in training (lowercased); its abbreviations guide
            the sentence splitter and its hyphenated words are kept whole (``ud``).
    """

    language = "en"

    def __init__(self, convention: str = "ud", vocabulary: Iterable[str] = ()) -> None:
        from nltk.tokenize import TreebankWordTokenizer

        if convention not in CONVENTIONS:
            raise InnError(f"unknown tokenization convention {convention!r}: use {' or '.join(CONVENTIONS)}")
        self.convention = convention
        self.vocabulary = {w.lower() for w in vocabulary}
        self.escapes = ptb_escapes(self.vocabulary)
        self.abbreviations = abbreviations(self.vocabulary) | ABBREVIATIONS
        self._sentences = SentenceSplitter(self.abbreviations)
        self._words = TreebankWordTokenizer()

    # ----------------------------------------------------------------------- sentences

    def sentence_spans(self, text: str) -> list[tuple[int, int, bool]]:
        """``(start, end, new_paragraph)`` of every sentence of ``text``
        (:meth:`inn.tagging.sentences.SentenceSplitter.spans`)."""
        return self._sentences.spans(text)

    def split(self, text: str) -> list[RawSentence]:
        """The sentences of ``text`` with their tokens and words; every offset indexes ``text``."""
        sentences = []
        for start, end, new_paragraph in self.sentence_spans(text):
            tokens = self.tokenize(text, start, end)
            if "".join(t.form for t in tokens) != "".join(text[start:end].split()):  # a safeguard: no character lost
                log.debug("tokens of %r lose characters; splitting it at whitespace", text[start:end])
                tokens = [
                    Token([Word(m.group(), m.start(), m.end(), m.group())])
                    for m in _NON_SPACE.finditer(text, start, end)
                ]
            if not tokens:
                continue
            for token, after in zip(tokens, tokens[1:]):
                token.space_after = after.start > token.end
            last = tokens[-1]
            last.space_after = last.end >= len(text) or text[last.end].isspace()
            sentences.append(RawSentence(tokens, " ".join(text[start:end].split()), new_paragraph))
        return sentences

    # ----------------------------------------------------------------------- words

    def tokenize(self, text: str, start: int = 0, end: int | None = None) -> list[Token]:
        """The tokens of the sentence ``text[start:end]``."""
        end = len(text) if end is None else end
        sentence = text[start:end]
        masked = PROTECTED.sub(lambda m: "x" * len(m.group()), sentence.translate(QUOTES).translate(SPACES))
        pieces = self._pieces(sentence, masked)
        pieces = [(a + start, b + start, m) for a, b, m in pieces]
        if self.convention == "ud":
            pieces = self._ud_pieces(text, pieces)
        return self._group(text, pieces)

    def _pieces(self, sentence: str, masked: str) -> list[tuple[int, int, str]]:
        """Treebank tokens of ``masked`` as (start, end, model form) in ``sentence``'s offsets."""
        raw = self._words.tokenize(masked)
        quotes = iter(m.group() for m in re.finditer(r"``|''|\"", masked))
        surface = [next(quotes) if token in ('"', "``", "''") else token for token in raw]
        pieces, point = [], 0
        for token, form in zip(raw, surface):
            begin = masked.find(form, point)
            if begin < 0:  # never seen; the text is then split at whitespace rather than lost
                log.debug("Treebank token %r not found in %r; splitting at whitespace", form, masked)
                return [(m.start(), m.end(), m.group()) for m in _NON_SPACE.finditer(sentence)]
            point = begin + len(form)
            if self.convention == "ptb":
                model = token if token in ("``", "''") else self.escapes.get(token, sentence[begin:point])
                model = model.translate(QUOTES)
            else:
                model = sentence[begin:point]
            pieces.append((begin, point, model))
        return pieces

    def _ud_pieces(self, text: str, pieces: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
        """UD English's splits on top of the Treebank's: runs of ``!?.`` joined, hyphens and
        slashes between letters split off, leading quotes split from words, bare contractions split."""
        out: list[tuple[int, int, str]] = []
        for a, b, form in pieces:
            lower = form.lower()
            for pattern, mark in ((HYPHENATED, "-"), (SLASHED, "/")):
                if (
                    pattern.match(form)
                    and lower not in self.vocabulary
                    and lower.split(mark)[0] not in (KEPT_PREFIXES if mark == "-" else ())
                ):
                    out += split_at(form, a, mark, self.vocabulary)
                    break
            else:
                out += self._ud_piece(a, b, form, lower)
        return join_runs(text, out)

    def _ud_piece(self, a: int, b: int, form: str, lower: str) -> list[tuple[int, int, str]]:
        """One Treebank token as UD English writes it: a period run or a final period split off,
        a leading quote split off, a bare contraction split."""
        dots = DOTS.match(form)
        if dots:
            parts = [p for p in dots.groups() if p]
            out, at = [], a
            for part in parts:
                out.append((at, at + len(part), part))
                at += len(part)
            return out
        if FINAL_PERIOD.match(form) and lower not in self.vocabulary and lower[:-1] not in self.abbreviations:
            return [(a, b - 1, form[:-1]), (b - 1, b, ".")]
        if (
            len(form) > 1
            and form[0] in APOSTROPHES + ('"',)
            and form[1].isalpha()
            and not CLITIC.match(form)
            and lower not in self.vocabulary
        ):
            return [(a, a + 1, form[0]), (a + 1, b, form[1:])]
        cut = BARE_CONTRACTIONS.get(lower)
        if cut is not None:
            return [(a, a + cut, form[:cut]), (a + cut, b, form[cut:])]
        return [(a, b, form)]

    def _group(self, text: str, pieces: list[tuple[int, int, str]]) -> list[Token]:
        """Pieces as tokens: in ``ud``, a clitic or a contraction's second half joined to the
        word before it (no space between) makes a multiword token."""
        tokens: list[Token] = []
        open_quote = False
        for i, (a, b, model) in enumerate(pieces):
            word = Word(text[a:b], a, b, model)
            if word.form in APOSTROPHES:  # a lone ' opens or closes a quote, or is a possessive
                follows_space = a == 0 or text[a - 1].isspace()
                if follows_space and i + 1 < len(pieces) and pieces[i + 1][0] == b:
                    open_quote = True
                elif open_quote:
                    open_quote = False
                    tokens.append(Token([word]))
                    continue
            if self.convention == "ud" and tokens and tokens[-1].end == a and self._joins(tokens[-1], word, i, pieces):
                tokens[-1].words.append(word)
            else:
                tokens.append(Token([word]))
        return tokens

    def _joins(self, previous: Token, word: Word, i: int, pieces) -> bool:
        """Whether ``word`` belongs to the surface token before it (UD's multiword tokens)."""
        before = previous.words[-1].form
        if not before[-1:].isalpha() or len(previous.words) > 1:
            return False
        lower = word.form.lower()
        if CLITIC.match(word.form):
            return True
        if word.form in APOSTROPHES:  # the possessive of a plural: parents'
            return before[-1] in "sS" and (i + 1 == len(pieces) or pieces[i + 1][0] > word.end)
        bare = (before + word.form).lower()
        if bare in BARE_CONTRACTIONS and BARE_CONTRACTIONS[bare] == len(before):
            return True
        return lower in SECOND_HALVES and (before + word.form).lower() in JOINED_CONTRACTIONS


def _english(convention: str = "ud", vocabulary: Iterable[str] = ()) -> Tokenizer:
    return Tokenizer(convention, vocabulary)


TOKENIZERS["en"] = _english


def tokenizer_for(
    language: str | None, convention: str = "ud", vocabulary: Iterable[str] = (), model: str = "the model"
) -> Tokenizer:
    """The tokenizer of ``language`` (an ISO 639 code) in ``convention``.

    Raises:
        InnError: no tokenizer for that language, or the language is not known (``None``).
    """
    if language is None:
        raise InnError(
            f"{model} does not record its language, so raw text cannot be split into its words: give "
            f"--language (tokenizers: {', '.join(sorted(TOKENIZERS))}), or pre-tokenized input "
            "(--input horizontal, vertical or conllu)"
        )
    factory = TOKENIZERS.get(language.lower().split("_")[0].split("-")[0])
    if factory is None:
        raise InnError(
            f"no tokenizer for language {language!r} ({model}): raw text can be tokenized in "
            f"{', '.join(sorted(TOKENIZERS))} only; give pre-tokenized input instead (--input horizontal, "
            "vertical or conllu)"
        )
    return factory(convention, vocabulary)
