"""Multiword tokens learned from a treebank: a surface token to its syntactic words.

UD writes some surface tokens as several words (a CoNLL-U range line ``1-2``): English
``don't`` = ``do`` + ``n't``, French ``du`` = ``de`` + ``le``, Hebrew ``בבית`` = ``ב`` + ``ה`` +
``בית``. :class:`MultiwordSplitter` learns two things from a training file's tokens, after
UDPipe 1's multiword splitter (Straka & Straková 2017):

- a dictionary: every lowercased form seen in training, with its most frequent analysis
  (its words, or none for a form seen mostly as one word);
- affix rules for forms never seen: a rule rewrites the token's prefix or suffix ``affix``
  and keeps the rest (the stem) as written: ``suffix n't -> ["", "n't"]`` splits ``shan't``
  into ``sha`` + ``n't``; ``prefix ל -> ["ל", ""]`` splits ``לירושלים`` into ``ל`` +
  ``ירושלים``. A rule is applied to an unseen form when, among the training tokens that end
  (or start) with its affix, more were this multiword token than anything else; the longest
  such affix wins. Otherwise the best guess is one word.

Words that are not substrings of the token (``du`` -> ``de le``) are written in the token's
case (``Du`` -> ``De le``, ``DU`` -> ``DE LE``).
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

log = logging.getLogger(__name__)

#: the longest affix a rule rewrites (characters)
MAX_AFFIX = 6


def _common_prefix(a: str, b: str) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _rules_of(form: str, words: Sequence[str]) -> list[tuple[str, str, tuple[str, ...]]]:
    """The affix rules that rewrite ``form`` (lowercased) into ``words``: ``(side, affix,
    pieces)``, where the stem is ``form`` less the affix and ``pieces`` are the words with the
    stem cut out of the first (suffix) or the last (prefix) word."""
    rules = []
    keep = _common_prefix(form, words[0])  # suffix rule: the stem opens the first word
    if 0 < len(form) - keep <= MAX_AFFIX:
        rules.append(("suffix", form[keep:], (words[0][keep:], *words[1:])))
    keep = _common_prefix(form[::-1], words[-1][::-1])  # prefix rule: the stem closes the last word
    if 0 < len(form) - keep <= MAX_AFFIX:
        cut = len(words[-1]) - keep
        rules.append(("prefix", form[: len(form) - keep], (*words[:-1], words[-1][:cut])))
    return rules


class MultiwordSplitter:
    """A surface token's syntactic words, from a dictionary and affix rules (module docstring).

    Args:
        forms: lowercased form -> its words (lowercased), for the forms whose most frequent
            analysis in training is a multiword token.
        seen: every lowercased token form training saw (a seen form not in ``forms`` is one word).
        rules: ``(side, affix)`` -> pieces, for the affixes whose best analysis is a rule.
    """

    def __init__(
        self, forms: dict[str, list[str]], seen: Iterable[str], rules: dict[tuple[str, str], list[str]]
    ) -> None:
        self.forms = forms
        self.seen = set(seen)
        self.rules = rules

    @classmethod
    def learn(cls, tokens: Iterable[tuple[str, Sequence[str]]]) -> MultiwordSplitter:
        """Learn from training tokens, each ``(surface form, its words)`` (one word for a plain token)."""
        analyses: dict[str, Counter] = defaultdict(Counter)
        for form, words in tokens:
            analyses[form.lower()][tuple(w.lower() for w in words)] += 1
        forms = {}
        affix_total: Counter = Counter()
        affix_rule: dict[tuple[str, str], Counter] = defaultdict(Counter)
        for form, counts in analyses.items():
            best, _ = counts.most_common(1)[0]
            if len(best) > 1:
                forms[form] = list(best)
            total = sum(counts.values())
            for n in range(1, min(MAX_AFFIX, len(form) - 1) + 1):
                affix_total["suffix", form[-n:]] += total
                affix_total["prefix", form[:n]] += total
            for words, count in counts.items():
                if len(words) > 1:
                    for side, affix, pieces in _rules_of(form, words):
                        affix_rule[side, affix][pieces] += count
        rules = {}
        for key, counts in affix_rule.items():
            pieces, count = counts.most_common(1)[0]
            if count * 2 > affix_total[key]:
                rules[key] = list(pieces)
        log.info(
            "multiword tokens: %d forms, %d affix rules, from %d token forms", len(forms), len(rules), len(analyses)
        )
        return cls(forms, analyses, rules)

    def split(self, token: str) -> list[tuple[int, int, str]]:
        """The words of ``token``: ``(start, end, form)`` each, offsets into ``token``. A word
        that is a stretch of the token has its offsets; one that is not (``du`` -> ``de``)
        spans the whole token. One word for a token that is not a multiword token."""
        lower = token.lower()
        if lower in self.forms:
            return _place(token, self.forms[lower])
        if lower in self.seen:
            return [(0, len(token), token)]
        for n in range(min(MAX_AFFIX, len(token) - 1), 0, -1):
            for side, affix in (("suffix", lower[-n:]), ("prefix", lower[:n])):
                pieces = self.rules.get((side, affix))
                if pieces is None:
                    continue
                if side == "suffix":
                    words = [lower[:-n] + pieces[0], *pieces[1:]]
                else:
                    words = [*pieces[:-1], pieces[-1] + lower[n:]]
                if all(words):
                    return _place(token, words)
        return [(0, len(token), token)]

    def to_dict(self) -> dict[str, Any]:
        """Plain values (a tagger file is read with ``weights_only=True``)."""
        return {
            "forms": self.forms,
            "seen": sorted(self.seen),
            "rules": [[side, affix, pieces] for (side, affix), pieces in sorted(self.rules.items())],
        }

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> MultiwordSplitter:
        return cls(dict(state["forms"]), state["seen"], {(s, a): list(p) for s, a, p in state["rules"]})


def _place(token: str, words: Sequence[str]) -> list[tuple[int, int, str]]:
    """``words`` (lowercased) as stretches of ``token`` where they spell it in order (its own
    case kept); else each spans the whole token, in the token's case."""
    if "".join(words) == token.lower():
        out, at = [], 0
        for word in words:
            out.append((at, at + len(word), token[at : at + len(word)]))
            at += len(word)
        return out
    if token.isupper() and len(token) > 1:
        cased = [w.upper() for w in words]
    elif token[:1].isupper():
        cased = [words[0][:1].upper() + words[0][1:], *words[1:]]
    else:
        cased = list(words)
    return [(0, len(token), w) for w in cased]
