"""Loading a trained tagger of either kind: a neural model (:mod:`inn.models`) or the averaged
perceptron (:mod:`inn.perceptron`).

It lives here, where both kinds are known, so that neither module needs the other, and
:mod:`inn.evaluate` (which scores both) sits above all three.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from inn.models import model_from_payload, read_checkpoint
from inn.perceptron import PerceptronPeer


def load_checkpoint(path: str | os.PathLike, device: str | torch.device = "cpu") -> tuple[Any, dict]:
    """Load a trained model of either kind: ``(model ready to evaluate, meta)``.

    A perceptron checkpoint gives a :class:`~inn.perceptron.PerceptronPeer`; any other is read
    as a neural checkpoint (:func:`inn.models.model_from_payload`).

    Raises:
        InnError: the file is missing, unreadable, or not a checkpoint of either kind.
    """
    payload = read_checkpoint(path, device)
    if isinstance(payload, dict) and "perceptron" in payload:
        return PerceptronPeer.from_state(payload["perceptron"]), payload.get("meta", {})
    return model_from_payload(payload, path, device)
