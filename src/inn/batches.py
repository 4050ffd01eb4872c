"""Prepared data as model inputs: encoded examples, length-bucketed batches, padding.

An example is a dict of tensors for one sequence (``words``/``affixes``/``shapes``/``tags``
for POS, ``x``/``y`` for walks); :func:`collate` pads a list of them into a batch dict with
a ``mask`` (B, n), True on real positions, left-aligned. Both tasks share the batching.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torch import Tensor

from inn.data.features import UNK, FeatureExtractor
from inn.data.tagged import Sentence, read_tagged
from inn.data.walk import load_walks
from inn.errors import InnError

Example = dict[str, Tensor]
#: tag index of a dev/test tag the training split never had: ignored by the loss, always an error
UNSEEN_TAG = -100


def load_features(data_dir: str | os.PathLike) -> FeatureExtractor:
    return FeatureExtractor.load(Path(data_dir) / "features.json")


def read_split(data_dir: str | os.PathLike, split: str) -> list[Sentence]:
    path = Path(data_dir) / f"{split}.tsv"
    if not path.is_file():
        raise InnError(f"prepared split not found: {path} (run the data stage first)")
    return read_tagged(path)


def encode_pos(sentences: list[Sentence], features: FeatureExtractor) -> list[Example]:
    """Feature indices and tag indices of every sentence, plus which words are singletons.

    ``singleton`` marks tokens whose lower-cased word occurred exactly once in training:
    word dropout maps some of them to the unknown word during training, so that the unknown
    embedding is trained at all (EWT's training split never fills the 39,000-word vocabulary,
    so without it no training token would ever read as unknown).
    """
    examples = []
    for sentence in sentences:
        words = [w for w, _ in sentence]
        enc = features.encode(words)
        singleton = torch.tensor([features.word_counts.get(w.lower(), 0) == 1 for w in words], dtype=torch.bool)
        examples.append(
            {
                "words": enc.words,
                "affixes": enc.affixes,
                "shapes": enc.shapes,
                "tags": torch.tensor([features.tags.index.get(t, UNSEEN_TAG) for _, t in sentence]),
                "singleton": singleton,
            }
        )
    return examples


def load_pos(
    data_dir: str | os.PathLike, split: str, features: FeatureExtractor, max_sentences: int | None = None
) -> tuple[list[Sentence], list[Example]]:
    """The sentences of one prepared split (the first ``max_sentences``) and their encodings."""
    sentences = read_split(data_dir, split)
    if max_sentences is not None:
        sentences = sentences[:max_sentences]
    if not sentences:
        raise InnError(f"{Path(data_dir) / split}.tsv holds no sentences")
    return sentences, encode_pos(sentences, features)


def load_walk_examples(path: str | os.PathLike, max_sequences: int | None = None) -> list[Example]:
    """Walks stored by :func:`inn.data.walk.save_walks` as one example per sequence."""
    data = load_walks(path)
    if len(data["lengths"]) == 0:
        raise InnError(f"{path} holds no walks")
    count = len(data["lengths"]) if max_sequences is None else min(max_sequences, len(data["lengths"]))
    return [{"x": data["x"][i, :n], "y": data["y"][i, :n]} for i, n in enumerate(data["lengths"][:count].tolist())]


def length(example: Example) -> int:
    return int(next(iter(example.values())).shape[0])


def make_batches(lengths: list[int], batch_size: int, generator: torch.Generator | None = None) -> list[list[int]]:
    """Indices grouped into batches of similar length (little padding).

    With a ``generator`` (training): sequences are ordered by length plus uniform noise of
    one length unit, so equal lengths are shuffled, cut into batches, and the batch order is
    shuffled. Without (evaluation): sorted by length, in order.
    """
    n = len(lengths)
    keys = torch.tensor(lengths, dtype=torch.float64)
    if generator is not None:
        keys = keys + torch.rand(n, generator=generator, dtype=torch.float64)
    order = torch.argsort(keys, stable=True).tolist()
    batches = [order[i : i + batch_size] for i in range(0, n, batch_size)]
    if generator is not None:
        batches = [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]
    return batches


def collate(
    examples: list[Example], word_dropout: float = 0.0, generator: torch.Generator | None = None
) -> dict[str, Tensor]:
    """Pad examples into one batch (B, n, ...); optionally drop singleton words to unknown."""
    B = len(examples)
    n = max(length(e) for e in examples)
    batch: dict[str, Tensor] = {}
    for key in examples[0]:
        first = examples[0][key]
        out = first.new_zeros((B, n) + tuple(first.shape[1:]))
        for b, e in enumerate(examples):
            out[b, : e[key].shape[0]] = e[key]
        batch[key] = out
    mask = torch.zeros(B, n, dtype=torch.bool)
    for b, e in enumerate(examples):
        mask[b, : length(e)] = True
    batch["mask"] = mask
    if word_dropout > 0 and "singleton" in batch:
        drop = batch.pop("singleton") & (torch.rand(B, n, generator=generator) < word_dropout)
        batch["words"] = torch.where(drop, torch.full_like(batch["words"], UNK), batch["words"])
    batch.pop("singleton", None)
    return batch


def to_device(batch: dict[str, Tensor], device: torch.device) -> dict[str, Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}
