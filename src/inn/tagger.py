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

from inn.checkpoints import COLUMNS, model_from_payload, read_checkpoint, self_contained, weights_digest
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
        #: the SHA-256 of its weights (:func:`inn.checkpoints.weights_digest`), which its test score names
        self.weights_sha256: str | None = None

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
        _check_fit(payload, path)
        features = FeatureExtractor.from_dict(data["vocabularies"])
        if data.get("column") not in COLUMNS:
            raise InnError(f"{path}: unknown tag column {data.get('column')!r} in its data section")
        tagger = cls(model, features, data["column"], meta, dev, batch_size)
        tagger.weights_sha256 = weights_digest(payload)
        test = meta.get("test")
        scored = test.get("weights_sha256") if isinstance(test, dict) else None
        if scored is not None and scored != tagger.weights_sha256:
            log.warning("%s: its test score was measured on other weights (sha256 %s...) than it holds", path,
                        scored[:16])
        return tagger

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
        digest = f"; weights sha256 {self.weights_sha256}" if self.weights_sha256 else ""
        return (f"{meta.get('model')} tagger of {meta.get('dataset')} (seed {meta.get('seed')}, scale "
                f"{meta.get('scale')}), {len(self.tags)} {self.column.upper()} tags" + (f"; {scores}" if scores else "")
                + digest)


def _check_fit(payload: dict[str, Any], path: str | os.PathLike) -> None:
    """Refuse a neural tagger file whose vocabularies do not fit its layers (a tag list shorter
    than its output layer would index past it while tagging), naming the mismatch."""
    cfg = payload.get("model_config")
    if cfg is None:
        return  # the perceptron keeps its own classes
    fix = "the file is damaged or was edited; export it again from its checkpoint with `inn export-tagger`"
    try:
        vocabularies = payload["data"]["vocabularies"]
        sizes = (len(vocabularies["tags"]), len(vocabularies["words"]),
                 [len(v) for v in vocabularies["affixes"].values()])
    except (KeyError, TypeError, AttributeError) as exc:
        raise InnError(f"{path}: its feature vocabularies are incomplete (no {exc}): {fix}") from None
    wrong = []
    if sizes[0] != cfg["num_classes"]:
        wrong.append(f"{sizes[0]} tags for an output layer of {cfg['num_classes']}")
    if sizes[1] != cfg["word_vocab"]:
        wrong.append(f"{sizes[1]} words for a word embedding of {cfg['word_vocab']}")
    if sizes[2] != list(cfg["affix_vocab"]):
        wrong.append(f"affix vocabularies of {sizes[2]} for embeddings of {list(cfg['affix_vocab'])}")
    if wrong:
        raise InnError(f"{path}: its vocabularies do not fit its model ({'; '.join(wrong)}): {fix}")
