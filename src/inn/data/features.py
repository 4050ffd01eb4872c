"""The tagger's input features (paper 3.2, after Huang et al. 2015), as integer indices.

Per token: the lower-cased word (the most frequent ``max_words`` training words), its prefixes
and suffixes of lengths 2, 3 and 4 (six vocabularies of the ``max_affixes`` most frequent
training affixes each), and eight binary shape features. An embedding layer turns the indices
into ``word_dim + 6 * affix_dim + 8`` numbers: 320 + 120 + 8 = 448 with the paper's sizes.

Vocabularies are fitted on the training split only and saved beside the prepared data, so
training and evaluation share indices. Index 0 is padding and index 1 the unknown entry in
every vocabulary; unseen words and affixes map to 1.
"""

from __future__ import annotations

import functools
import os
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from inn.errors import InnError
from inn.io import write_json

PAD, UNK = 0, 1
SPECIALS = ("<pad>", "<unk>")
AFFIX_LENGTHS = (2, 3, 4)
#: The six affix vocabularies, in feature order.
AFFIX_KINDS = tuple(f"{side}{n}" for side in ("prefix", "suffix") for n in AFFIX_LENGTHS)

_NUMBER = re.compile(r"^[+-]?(\d+([.,/:-]\d+)*|\d*[.,]\d+)(st|nd|rd|th|s)?$", re.IGNORECASE)


def _is_punct(ch: str) -> bool:
    return unicodedata.category(ch).startswith("P")


def _is_symbol(ch: str) -> bool:
    return unicodedata.category(ch).startswith("S")


#: The eight binary features: (name, predicate on the raw word), in feature order.
SHAPE_FEATURES: tuple[tuple[str, callable], ...] = (
    ("is_number", lambda w: bool(_NUMBER.match(w))),
    ("has_digit", lambda w: any(c.isdigit() for c in w)),
    ("is_punctuation", lambda w: all(_is_punct(c) for c in w)),
    ("has_symbol", lambda w: any(_is_symbol(c) for c in w)),
    ("has_hyphen", lambda w: "-" in w and len(w) > 1),
    ("all_caps", lambda w: any(c.isalpha() for c in w) and not any(c.islower() for c in w)),
    ("initial_cap", lambda w: w[:1].isupper() and any(c.islower() for c in w)),
    ("inner_cap", lambda w: any(c.isupper() for c in w[1:]) and any(c.islower() for c in w)),
)


@functools.lru_cache(maxsize=1 << 16)  # a word's features never change; text repeats its words
def feature_size(word_dim: int, affix_dim: int) -> int:
    """Width of a token's embedded input: its word, its affixes and its shape features
    (320 + 6 x 20 + 8 = 448 with the paper's sizes); what a POS model's hidden size is by default."""
    return word_dim + len(AFFIX_KINDS) * affix_dim + len(SHAPE_FEATURES)


def shape_features(word: str) -> tuple[float, ...]:
    """The eight binary shape features of ``word`` (see :data:`SHAPE_FEATURES`)."""
    return tuple(float(test(word)) for _, test in SHAPE_FEATURES)


@functools.lru_cache(maxsize=1 << 16)
def affixes(word: str) -> tuple[str, ...]:
    """The six affixes of the lower-cased ``word`` in :data:`AFFIX_KINDS` order.

    A word shorter than the affix length has no such affix; it gets the empty string, which is
    never in a vocabulary and so maps to unknown.
    """
    lower = word.lower()
    pre = tuple(lower[:n] if len(lower) >= n else "" for n in AFFIX_LENGTHS)
    suf = tuple(lower[-n:] if len(lower) >= n else "" for n in AFFIX_LENGTHS)
    return pre + suf


@dataclass
class Vocabulary:
    """A frequency-ranked string -> index map with padding (0) and unknown (1) entries."""

    items: list[str] = field(default_factory=lambda: list(SPECIALS))

    def __post_init__(self) -> None:
        self.index = {item: i for i, item in enumerate(self.items)}

    @classmethod
    def from_counts(cls, counts: Counter, max_size: int) -> Vocabulary:
        """The ``max_size`` most frequent items (ties broken alphabetically, so reproducible)."""
        ranked = sorted((item for item in counts if item), key=lambda item: (-counts[item], item))
        return cls(list(SPECIALS) + ranked[:max_size])

    def __len__(self) -> int:
        return len(self.items)

    def __contains__(self, item: str) -> bool:
        return item in self.index

    def lookup(self, item: str) -> int:
        return self.index.get(item, UNK)


@dataclass
class EncodedSentence:
    """Feature indices of one sentence of ``n`` tokens."""

    words: torch.Tensor  # (n,) long, index into the word vocabulary
    affixes: torch.Tensor  # (n, 6) long, one column per AFFIX_KINDS vocabulary
    shapes: torch.Tensor  # (n, 8) float, the binary shape features


class FeatureExtractor:
    """Maps words to the feature indices of paper 3.2; fitted on the training split only.

    Args:
        max_words: word vocabulary size (most frequent lower-cased training words).
        max_affixes: size of each of the six affix vocabularies.
        word_dim: word-embedding width (320 in the paper).
        affix_dim: width of each affix embedding (20 in the paper).
    """

    def __init__(
        self, max_words: int = 39_000, max_affixes: int = 2_000, word_dim: int = 320, affix_dim: int = 20
    ) -> None:
        self.max_words, self.max_affixes = max_words, max_affixes
        self.word_dim, self.affix_dim = word_dim, affix_dim
        self.words: Vocabulary | None = None
        self.affixes: dict[str, Vocabulary] = {}
        self.tags: Vocabulary | None = None
        self.word_counts: Counter = Counter()

    @property
    def feature_size(self) -> int:
        """Width of the embedded input: word, six affixes, eight shape features."""
        return feature_size(self.word_dim, self.affix_dim)

    @property
    def fitted(self) -> bool:
        return self.words is not None

    def fit(self, train_sentences: Sequence[Sequence[tuple[str, str]]]) -> FeatureExtractor:
        """Count words, affixes and tags of the training sentences and build the vocabularies."""
        if not train_sentences:
            raise InnError("FeatureExtractor.fit: the training split is empty")
        words: Counter = Counter()
        affix_counts = {kind: Counter() for kind in AFFIX_KINDS}
        tags: Counter = Counter()
        for sentence in train_sentences:
            for word, tag in sentence:
                words[word.lower()] += 1
                tags[tag] += 1
                for kind, affix in zip(AFFIX_KINDS, affixes(word)):
                    affix_counts[kind][affix] += 1
        self.word_counts = words
        self.words = Vocabulary.from_counts(words, self.max_words)
        self.affixes = {k: Vocabulary.from_counts(c, self.max_affixes) for k, c in affix_counts.items()}
        # Tags have no unknown entry: an unseen tag at test time is simply never predicted.
        self.tags = Vocabulary(sorted(tags))
        return self

    def _require_fit(self) -> None:
        if not self.fitted:
            raise InnError("FeatureExtractor is not fitted: call .fit(train_sentences) or .load(path)")

    def encode(self, words: Sequence[str]) -> EncodedSentence:
        """Feature indices of a sentence given as its words."""
        self._require_fit()
        word_ids = [self.words.lookup(w.lower()) for w in words]
        affix_ids = [[self.affixes[k].lookup(a) for k, a in zip(AFFIX_KINDS, affixes(w))] for w in words]
        return EncodedSentence(
            words=torch.tensor(word_ids, dtype=torch.long),
            affixes=torch.tensor(affix_ids, dtype=torch.long).reshape(len(words), len(AFFIX_KINDS)),
            shapes=torch.tensor([shape_features(w) for w in words], dtype=torch.float32).reshape(
                len(words), len(SHAPE_FEATURES)
            ),
        )

    def encode_tags(self, tags: Iterable[str]) -> torch.Tensor:
        """Tag indices; raises on a tag the training split never had."""
        self._require_fit()
        try:
            return torch.tensor([self.tags.index[t] for t in tags], dtype=torch.long)
        except KeyError as exc:
            raise InnError(f"tag {exc.args[0]!r} does not occur in the training split") from None

    def is_known(self, word: str) -> bool:
        """Whether the lower-cased ``word`` occurred in the training split."""
        self._require_fit()
        return word.lower() in self.word_counts

    # ----------------------------------------------------------------- persistence

    def to_dict(self) -> dict:
        self._require_fit()
        return {
            "sizes": {
                "max_words": self.max_words,
                "max_affixes": self.max_affixes,
                "word_dim": self.word_dim,
                "affix_dim": self.affix_dim,
            },
            "feature_size": self.feature_size,
            "shape_features": [name for name, _ in SHAPE_FEATURES],
            "tags": self.tags.items,
            "words": self.words.items,
            "affixes": {kind: vocab.items for kind, vocab in self.affixes.items()},
            "word_counts": dict(self.word_counts.most_common()),
        }

    def save(self, path: str | os.PathLike) -> None:
        """Write the fitted vocabularies as JSON (atomically)."""
        write_json(path, self.to_dict())

    @classmethod
    def from_dict(cls, data: dict) -> FeatureExtractor:
        """The extractor :meth:`to_dict` describes (a tagger file holds it the same way)."""
        extractor = cls(**data["sizes"])
        extractor.words = Vocabulary(list(data["words"]))
        extractor.affixes = {kind: Vocabulary(list(items)) for kind, items in data["affixes"].items()}
        extractor.tags = Vocabulary(list(data["tags"]))
        extractor.word_counts = Counter(data["word_counts"])
        return extractor

    @classmethod
    def load(cls, path: str | os.PathLike) -> FeatureExtractor:
        """Read vocabularies written by :meth:`save`."""
        import json

        path = Path(path)
        if not path.is_file():
            raise InnError(f"feature vocabularies not found: {path} (run the data stage first)")
        fix = "delete it and prepare the corpus again (the data stage rewrites it)"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            problem = "the file is empty" if not path.stat().st_size else f"not JSON: {exc}"
            raise InnError(f"damaged feature vocabularies {path} ({problem}): {fix}") from None
        try:
            return cls.from_dict(data)
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            missing = f"no {exc.args[0]!r} entry" if isinstance(exc, KeyError) else f"unexpected content: {exc}"
            raise InnError(f"damaged feature vocabularies {path} ({missing}): {fix}") from None
