"""What a training run reads of its prepared task folder (:class:`TaskData`), and the embedding rows
that a run on part of the training split never trains (:func:`_never_trained`), tied to the
unknown word's as a word outside the vocabulary is (:func:`_tie_to_unknown`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from inn import batches as B
from inn.data.features import UNK
from inn.experiment.train.settings import TrainConfig
from inn.models import SequenceLabeler
from inn.registry import task_spec


@dataclass
class TaskData:
    """Training and validation examples of one task, and what the model needs to know of them."""

    task: str
    train: list[B.Example]
    dev: list[B.Example]
    model_fields: dict[str, Any]  # ModelConfig fields the data decides (vocabularies, widths)
    meta: dict[str, Any]


def load_task_data(task: str, data_dir: str | os.PathLike, cfg: TrainConfig) -> TaskData:
    """Read a prepared POS corpus folder or walk folder (the data stage's outputs)."""
    data_dir = Path(data_dir)
    if task_spec(task).tags:
        features = B.load_features(data_dir)
        _, train = B.load_pos(data_dir, "train", features, cfg.max_train)
        _, dev = B.load_pos(data_dir, "dev", features, cfg.max_dev)
        fields_ = {
            "num_classes": len(features.tags),
            "word_vocab": len(features.words),
            "affix_vocab": tuple(len(v) for v in features.affixes.values()),
            "word_dim": features.word_dim,
            "affix_dim": features.affix_dim,
        }
        return TaskData(task, train, dev, fields_, {"tags": list(features.tags.items)})
    train = B.load_walk_examples(data_dir / "train.pt", cfg.max_train)
    dev = B.load_walk_examples(data_dir / "dev.pt", cfg.max_dev)
    dim = int(train[0]["x"].shape[-1])
    return TaskData(task, train, dev, {"num_classes": 2, "input_dim": dim}, {})


def _never_trained(data: TaskData, model: SequenceLabeler) -> list[tuple[nn.Embedding, torch.Tensor]]:
    """Per embedding table of a POS model, the rows that no training sentence uses. The
    vocabularies come from the whole training split, so with ``max_train`` the words (and
    affixes) only in the rest would keep their random initial vectors; :func:`_tie_to_unknown`
    makes them the unknown entry's instead, as a word outside the vocabulary is. Empty (nothing
    to do) when training sees the whole split."""
    if not task_spec(data.task).tags:
        return []
    encoder = model.encoder
    tables = [(encoder.words, torch.cat([e["words"] for e in data.train]))]
    tables += [
        (table, torch.cat([e["affixes"][:, kind] for e in data.train])) for kind, table in enumerate(encoder.affixes)
    ]
    untrained = []
    for table, used in tables:
        unused = torch.ones(table.num_embeddings, dtype=torch.bool)
        unused[used.unique()] = False
        unused[: UNK + 1] = False  # padding and the unknown entry itself
        if unused.any():
            untrained.append((table, unused.nonzero().squeeze(1).to(table.weight.device)))
    return untrained


def _tie_to_unknown(untrained: list[tuple[nn.Embedding, torch.Tensor]]) -> None:
    """Copy each table's unknown vector into its never-trained rows (they get no gradient, so
    this only changes what they say at evaluation and in the saved model)."""
    with torch.no_grad():
        for table, rows in untrained:
            table.weight[rows] = table.weight[UNK].clone()
