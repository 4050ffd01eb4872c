"""Tag new text with a trained model: :class:`Tagger`, what ``inn tag`` runs.

A tagger file (a POS ``checkpoint.pt`` the workflow trained, or the ``tagger.pt`` exported
beside its evaluation) holds everything tagging needs: the weights, the feature vocabularies,
the tag set and the CoNLL-U column it predicts (:mod:`inn.checkpoints`). So::

    tagger = Tagger.load("results/taggers/pos/ewt/inn/seed1/tagger.pt")
    tagger.tag([["The", "cat", "sleeps"]])          # [["DT", "NN", "VBZ"]]
    tagger.tag_conllu(open("in.conllu").read())     # the same text, its XPOS column filled

Neural models tag in batches of similar length (those of ``inn evaluate``, so the same
sentences get the same tags), without autograd, on CUDA when present; the implicit layer's
solves that miss their tolerance are counted (:attr:`Tagger.nonconverged`), never silent.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

import torch

from inn.checkpoints import COLUMNS, model_from_payload, read_checkpoint, self_contained
from inn.data.documents import TextSentence, read_text, write_text
from inn.data.features import FeatureExtractor
from inn.errors import InnError
from inn.models import predict
from inn.scoring import score_pos

log = logging.getLogger(__name__)


class Tagger:
    """A trained POS model (neural or the perceptron) with its vocabularies and tag column.

    Attributes:
        meta: what the file says of the model: corpus (``dataset``), model, seed, scale,
            training settings, dev and (exported files) test scores.
        column: the CoNLL-U column it fills, ``xpos`` or ``upos``.
        nonconverged: implicit solves that missed their tolerance, over all calls so far.
    """

    def __init__(self, model: Any, features: FeatureExtractor, column: str, meta: dict[str, Any],
                 device: torch.device, batch_size: int = 20) -> None:
        self.model = model
        self.features = features
        self.column = column
        self.meta = meta
        self.device = device
        self.batch_size = batch_size
        self.nonconverged = 0

    @classmethod
    def load(cls, path: str | os.PathLike, device: str = "auto", batch_size: int = 20) -> Tagger:
        """Read a tagger file (``torch.load(weights_only=True)``: it cannot run code).

        Args:
            device: ``auto`` (CUDA when present), ``cpu`` or ``cuda``.
            batch_size: sentences per batch; 20, as evaluation uses, gives its exact tags.

        Raises:
            InnError: the file is missing or unreadable, not a POS model, from an inn whose
                files this one cannot read, or a checkpoint from before tagger files (the
                message says how to convert it).
        """
        from inn.device import resolve_device

        dev = resolve_device(device)
        payload = self_contained(read_checkpoint(path, dev), path)
        model, meta = model_from_payload(payload, path, dev)
        data = payload["data"]
        features = FeatureExtractor.from_dict(data["vocabularies"])
        if data.get("column") not in COLUMNS:
            raise InnError(f"{path}: unknown tag column {data.get('column')!r} in its data section")
        return cls(model, features, data["column"], meta, dev, batch_size)

    @property
    def is_perceptron(self) -> bool:
        return bool(getattr(self.model, "is_perceptron", False))

    @property
    def tags(self) -> list[str]:
        """The tag set, in the model's order."""
        return list(self.features.tags.items)

    def tag(self, sentences: Sequence[Sequence[str]], progress: bool = False) -> list[list[str]]:
        """One tag per word of every sentence (a list of words each); empty sentences stay empty.

        ``progress``: a progress bar over the batches (on a terminal).
        """
        sentences = [list(words) for words in sentences]
        if self.is_perceptron:
            return self.model.tag_sentences(sentences)
        index = [i for i, words in enumerate(sentences) if words]
        tags: list[list[str]] = [[] for _ in sentences]
        if not index:
            return tags
        examples = []
        for i in index:
            encoded = self.features.encode(sentences[i])
            examples.append({"words": encoded.words, "affixes": encoded.affixes, "shapes": encoded.shapes})
        labels, _, failed = predict(self.model, examples, self.batch_size, self.device, progress)
        self.nonconverged += failed
        names = self.tags
        for i, row in zip(index, labels):
            tags[i] = [names[t] for t in row.tolist()]
        return tags

    def tag_conllu(self, text: str, column: str | None = None) -> str:
        """CoNLL-U ``text`` with its ``column`` (default: the model's) filled for every
        syntactic word; every other line and column is unchanged."""
        sentences, _ = read_text(text.encode("utf-8"), "<text>", "conllu")
        return write_text(sentences, self.tag([s.words for s in sentences]), "conllu", column or self.column)

    def accuracy(self, sentences: Sequence[TextSentence], predicted: Sequence[Sequence[str]],
                 column: str | None = None, sources: Sequence[str] | None = None) -> dict[str, Any]:
        """Token and unseen-word accuracy (%) of ``predicted`` against the gold tags in the
        CoNLL-U ``column`` of ``sentences``, scored as ``inn evaluate`` scores a split.
        ``sources``: each sentence's file, for messages.

        Raises:
            InnError: a word has no gold tag in that column (naming its line).
        """
        column = column or self.column
        gold = []
        for s, sentence in enumerate(sentences):
            tags = sentence.column(column)
            for tag, number in zip(tags, sentence.line_numbers):
                if tag == "_":
                    source = sources[s] if sources is not None else "<text>"
                    raise InnError(f"{source}:{number}: no gold {column.upper()} tag to score against "
                                   f"(--accuracy needs the gold tags in the {column.upper()} column)")
            gold.append(list(zip(sentence.words, tags)))
        metrics, _ = score_pos(gold, predicted, self.features.is_known)
        return {k: metrics[k] for k in ("accuracy", "unseen_accuracy", "tokens", "unseen_tokens", "sentences")}

    def describe(self) -> str:
        """One line: model, corpus, seed, tag column and its scores."""
        meta = self.meta
        scores = ", ".join(f"{split} {meta[split]['accuracy']:.2f}%" for split in ("dev", "test")
                           if isinstance(meta.get(split), dict) and meta[split].get("accuracy") is not None)
        return (f"{meta.get('model')} tagger of {meta.get('dataset')} (seed {meta.get('seed')}, scale "
                f"{meta.get('scale')}), {len(self.tags)} {self.column.upper()} tags" + (f"; {scores}" if scores else ""))
