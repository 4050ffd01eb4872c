"""Checkpoints: the one module that writes and reads trained taggers of either kind, a neural
model (:mod:`inn.models`) or the averaged perceptron (:mod:`inn.perceptron`).

It lives here, where both kinds are known, so that neither module needs the other.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Any

import torch

from inn.errors import InnError
from inn.models import ModelConfig, SequenceLabeler, build_model
from inn.perceptron import PerceptronPeer

#: the layout of a neural checkpoint (``format``, ``model_config``, ``state_dict``, ``meta``)
CHECKPOINT_FORMAT = 1


def neural_payload(model: SequenceLabeler, meta: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """What a neural checkpoint holds: format, model config, weights, ``meta`` and ``extra``
    (the trainer's resume state adds its optimiser, epoch and settings)."""
    weights = {name: value.detach().cpu().clone() for name, value in model.state_dict().items()}
    return {"format": CHECKPOINT_FORMAT, "model_config": asdict(model.config), "state_dict": weights,
            "meta": meta, **extra}


def read_checkpoint(path: str | os.PathLike, device: str | torch.device = "cpu") -> Any:
    """The stored object of a checkpoint file (either kind; :func:`load_checkpoint` tells them apart).

    Raises:
        InnError: the file is missing or cannot be read (truncated, not a torch file).
    """
    if not os.path.isfile(path):
        raise InnError(f"checkpoint not found: {path} (train the model first)")
    try:
        return torch.load(path, map_location=device, weights_only=False)
    except Exception as exc:  # a truncated or foreign file
        raise InnError(f"cannot read checkpoint {path} (truncated, or not a torch file: {exc}); "
                       "delete it and train the model again") from None


def model_from_payload(payload: Any, path: str | os.PathLike,
                       device: str | torch.device = "cpu") -> tuple[SequenceLabeler, dict]:
    """Build the model a neural checkpoint's ``payload`` describes: ``(model in eval mode, meta)``.

    Raises:
        InnError: ``payload`` is not a neural ``inn`` checkpoint, or its weights do not fit its
            configuration.
    """
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT or "model_config" not in payload:
        raise InnError(f"{path} is not an inn model checkpoint (format {CHECKPOINT_FORMAT})")
    cfg = ModelConfig(**payload["model_config"])
    model = build_model(cfg)
    try:
        model.load_state_dict(payload["state_dict"])
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[-1].strip()
        raise InnError(f"{path}: weights do not match the model configuration it names ({first})") from None
    return model.to(device).eval(), payload.get("meta", {})


def load_checkpoint(path: str | os.PathLike, device: str | torch.device = "cpu") -> tuple[Any, dict]:
    """Load a trained model of either kind: ``(model ready to evaluate, meta)``.

    A perceptron checkpoint gives a :class:`~inn.perceptron.PerceptronPeer`, a neural one a
    :class:`~inn.models.SequenceLabeler` in eval mode. ``meta`` holds the task, dataset, model
    name, seed, training settings and the epoch the weights come from.

    Raises:
        InnError: the file is missing, unreadable, or not a checkpoint of either kind.
    """
    payload = read_checkpoint(path, device)
    if isinstance(payload, dict) and "perceptron" in payload:
        return PerceptronPeer.from_state(payload["perceptron"]), payload.get("meta", {})
    return model_from_payload(payload, path, device)


def save_perceptron(peer: PerceptronPeer, path: str | os.PathLike, meta: dict[str, Any]) -> None:
    """Write a perceptron checkpoint (atomically)."""
    from inn.io import torch_save

    torch_save({"format": PerceptronPeer.FORMAT, "perceptron": peer.state(), "meta": meta}, path)
