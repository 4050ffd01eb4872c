"""English as the rule tokenizer (:mod:`inn.tagging.tokenize`) writes it: the word lists and
patterns of its rules, in UD English's and the Penn Treebank's conventions.

- the same-length stand-ins that keep the Treebank tokenizer's offsets the text's: curly quotes
  read as straight ones, URLs, e-mail addresses and emoticons masked whole;
- UD English's splits: clitics and contractions (``'m``, ``n't``, ``cannot``, apostrophe-less
  ``dont``), hyphens between letters unless the first part is a prefix kept attached, periods
  and punctuation runs;
- the abbreviations every English text may hold (titles, months, days, Latin), which the
  sentence splitter does not end a sentence at;
- the Penn Treebank's bracket escapes (``-LRB-``...), and each bracket's nearest escape that a
  corpus holds.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# Same-length stand-ins, so that the Treebank tokenizer's offsets are the text's.
QUOTES = str.maketrans(
    {
        "\u2018": "'",
        "\u2019": "'",
        "\u201a": "'",
        "\u201b": "'",
        "\u2032": "'",
        "\u201c": '"',
        "\u201d": '"',
        "\u201e": '"',
        "\u201f": '"',
        "\u2033": '"',
    }
)
PROTECTED = re.compile(
    r"(?:https?://|ftp://|www\.)[^\s<>\"]*[^\s<>\"\.,;:!?\)\]}']"  # URLs, without trailing punctuation
    r"|(?<![\w.+-])[\w.+-]+@[\w-]+(?:\.[\w-]+)+"  # e-mail addresses, tried only where a run starts (linear)
    r"|(?<!\S)[:;=][-o^']?[()\[\]DPp/\\|3*]+(?=[\s.,!?]|$)"  # emoticons :) :-( ;P
)
CLITIC = re.compile(r"(?i)^(?:['\u2019`](?:s|m|d|ll|re|ve)|n['\u2019]t)$")
APOSTROPHES = ("'", "\u2019")
# the second halves the Treebank tokenizer splits off a word (MacIntyre's contractions)
SECOND_HALVES = {"not", "na", "ta", "me", "'n", "'ye", "is", "was"}
# the words of a contraction whose second half (:data:`SECOND_HALVES`) stays in one surface token
JOINED_CONTRACTIONS = {
    "cannot",
    "gonna",
    "gotta",
    "gimme",
    "lemme",
    "wanna",
    "more'n",
    "d'ye",
    "'tis",
    "'twas",
}
HYPHENATED = re.compile(r"^(?=.*[^\W\d_])[^\W_]+(?:-[^\W_]+)+$")  # parts of letters or digits, a letter somewhere
SLASHED = re.compile(r"^[^\W\d_]+(?:/[^\W\d_]+)+$")
DOTS = re.compile(r"^(\w+)(\.{2,})(\w*)$")  # missing..and, Depot..
FINAL_PERIOD = re.compile(r"^[^\W_][^.]*[^\W_]\.$|^[^\W\d_]\w*\.$")  # format. (one period, at the end)
RUNS = (
    re.compile(r"^[.?!]+$"),
    re.compile(r"^[-=~_*+#]+$"),
    re.compile(r"^<+$"),
    re.compile(r"^>+$"),
    re.compile(r"^\$+$"),
)
# prefixes UD English keeps attached to the word after the hyphen (UD guidelines, EWT's practice)
KEPT_PREFIXES = {
    "e",
    "non",
    "pre",
    "post",
    "co",
    "ex",
    "re",
    "anti",
    "pro",
    "multi",
    "mid",
    "semi",
    "sub",
    "intra",
    "counter",
    "over",
    "under",
    "mis",
    "de",
    "un",
    "bi",
    "tri",
    "uni",
    "neo",
    "pseudo",
    "quasi",
    "ultra",
    "mega",
    "mini",
    "cyber",
    "cross",
    "socio",
    "psycho",
}
# common English abbreviations, besides those of the model's vocabulary (titles, months, days, Latin)
ABBREVIATIONS = {
    "mr",
    "mrs",
    "ms",
    "dr",
    "prof",
    "rev",
    "hon",
    "capt",
    "col",
    "gen",
    "gov",
    "lt",
    "sgt",
    "sen",
    "rep",
    "st",
    "jr",
    "sr",
    "inc",
    "corp",
    "co",
    "ltd",
    "bros",
    "dept",
    "univ",
    "assn",
    "ave",
    "blvd",
    "rd",
    "mt",
    "ft",
    "jan",
    "feb",
    "mar",
    "apr",
    "jun",
    "jul",
    "aug",
    "sep",
    "sept",
    "oct",
    "nov",
    "dec",
    "mon",
    "tue",
    "tues",
    "wed",
    "thu",
    "thur",
    "thurs",
    "fri",
    "sat",
    "sun",
    "vs",
    "etc",
    "e.g",
    "i.e",
    "cf",
    "al",
    "approx",
    "est",
    "fig",
    "no",
    "nos",
    "vol",
    "pp",
    "ca",
    "viz",
    "a.m",
    "p.m",
    "u.s",
    "u.k",
    "u.n",
}
# apostrophe-less contractions that UD English still splits (EWT: ``dont`` = ``do`` + ``nt``)
BARE_CONTRACTIONS = {
    "dont": 2,
    "didnt": 3,
    "doesnt": 4,
    "isnt": 2,
    "wasnt": 3,
    "arent": 3,
    "werent": 4,
    "cant": 2,
    "couldnt": 5,
    "wouldnt": 5,
    "shouldnt": 6,
    "havent": 4,
    "hasnt": 3,
    "hadnt": 3,
    "wont": 2,
    "aint": 2,
    "im": 1,
    "ive": 1,
    "thats": 4,
}
#: the Penn Treebank's spelling of brackets
PTB_ESCAPES = {"(": "-LRB-", ")": "-RRB-", "[": "-LSB-", "]": "-RSB-", "{": "-LCB-", "}": "-RCB-"}
#: each bracket's escapes, nearest first: a corpus may write only some (NLTK's sample of the
#: WSJ has ``-LCB-`` but no ``-LSB-``), and its taggers have seen and tagged only those
BRACKET_ESCAPES = {
    "(": ("-LRB-",),
    ")": ("-RRB-",),
    "[": ("-LSB-", "-LCB-", "-LRB-"),
    "]": ("-RSB-", "-RCB-", "-RRB-"),
    "{": ("-LCB-", "-LSB-", "-LRB-"),
    "}": ("-RCB-", "-RSB-", "-RRB-"),
}


def ptb_escapes(vocabulary: Iterable[str] = ()) -> dict[str, str]:
    """Each bracket's Penn Treebank escape, as a tagger of ``vocabulary`` (its training words)
    reads it: the nearest escape the vocabulary holds (``[`` as ``-LCB-`` for a corpus without
    ``-LSB-``), else :data:`PTB_ESCAPES`'s, so that a bracket is never an unseen word when
    training saw another of its kind."""
    known = {w.lower() for w in vocabulary}
    return {
        bracket: next((e for e in escapes if e.lower() in known), PTB_ESCAPES[bracket])
        for bracket, escapes in BRACKET_ESCAPES.items()
    }


def join_runs(text: str, pieces: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """Adjacent pieces of one punctuation run (``!!!``, ``?!``, ``<<``, ``=---``) as one piece,
    its form sliced from ``text`` once (joining the forms piece by piece is quadratic in a run's
    length)."""
    out: list[tuple[int, int, str | None]] = []
    kind_before = None
    for a, b, form in pieces:
        kind = next((i for i, run in enumerate(RUNS) if run.match(form)), None)
        if kind is not None and kind == kind_before and out[-1][1] == a:
            out[-1] = (out[-1][0], b, None)
        else:
            out.append((a, b, form))
        kind_before = kind
    return [(a, b, text[a:b] if form is None else form) for a, b, form in out]


def split_at(form: str, start: int, mark: str, vocabulary: set[str]) -> list[tuple[int, int, str]]:
    """``form`` (at ``start``) split at every ``mark``, the mark a piece of its own; a part that
    the vocabulary holds with the mark after it stays so (``w/`` in ``w/it``)."""
    out: list[tuple[int, int, str]] = []
    at = start
    parts = form.split(mark)
    for i, part in enumerate(parts):
        last = i + 1 == len(parts)
        if not last and (part + mark).lower() in vocabulary:
            out.append((at, at + len(part) + 1, part + mark))
            at += len(part) + 1
            continue
        out.append((at, at + len(part), part))
        at += len(part)
        if not last:
            out.append((at, at + 1, mark))
            at += 1
    return out
