"""The classical peer: NLTK's averaged perceptron tagger, trained on the same train split.

It is what a user would pick instead of a neural tagger (93.4% on EWT test when trained on EWT
train, the figure published for it and the one we measure: docs/results.md). ``inn
train-perceptron`` (:mod:`inn.experiment.train.perceptron`) trains it into the same output layout as
the neural models, and ``inn evaluate`` scores it with the same code
(:func:`inn.tagging.scoring.score_pos`).
"""

from __future__ import annotations

import random
from typing import Any

from inn.errors import InnError


class PerceptronPeer:
    """A trained averaged perceptron with the small interface evaluation needs."""

    is_perceptron = True
    config = None

    def __init__(self, tagger) -> None:
        self.tagger = tagger

    def tag_sentences(self, sentences: list[list[str]]) -> list[list[str]]:
        return [[tag for _, tag in self.tagger.tag(words)] if words else [] for words in sentences]

    def eval(self) -> PerceptronPeer:
        return self

    def state(self) -> dict[str, Any]:
        return {
            "weights": self.tagger.model.weights,
            "tagdict": self.tagger.tagdict,
            "classes": sorted(self.tagger.classes),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> PerceptronPeer:
        from nltk.tag.perceptron import PerceptronTagger

        tagger = PerceptronTagger(load=False)
        tagger.model.weights = state["weights"]
        tagger.tagdict = state["tagdict"]
        tagger.classes = set(state["classes"])
        tagger.model.classes = tagger.classes
        return cls(tagger)


def train_perceptron(sentences: list[list[tuple[str, str]]], iterations: int = 5, seed: int = 1) -> PerceptronPeer:
    """Train NLTK's averaged perceptron (its own features) for ``iterations`` passes."""
    from nltk.tag.perceptron import PerceptronTagger

    if not sentences:
        raise InnError("the perceptron's training split is empty")
    tagger = PerceptronTagger(load=False)
    state = random.getstate()
    random.seed(seed)  # NLTK shuffles with the global random module
    try:
        tagger.train([list(s) for s in sentences], nr_iter=iterations)
    finally:
        random.setstate(state)
    return PerceptronPeer(tagger)
