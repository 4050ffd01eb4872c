"""Segmenter files (``inn train-segmenter``) and the segmenter section of a tagger file."""

from __future__ import annotations

import os
from typing import Any

from inn.errors import InnError

#: the layout of a segmenter file: ``{"format": SEGMENTER_FORMAT, "segmenter": Segmenter.to_dict()}``
SEGMENTER_FORMAT = 1


def read_segmenter_state(path: str | os.PathLike) -> dict[str, Any]:
    """The segmenter state in a segmenter file (``weights_only``: it cannot run code).

    Raises:
        InnError: the file is missing, unreadable or not a segmenter file.
    """
    from inn.io import torch_load_data, torch_load_problem

    fix = "give a segmenter file written by inn train-segmenter"
    if not os.path.isfile(path):
        raise InnError(f"no segmenter file {path}: {fix}")
    try:
        payload = torch_load_data(path, fix)
    except InnError:
        raise
    except Exception as exc:  # empty, truncated or foreign
        raise InnError(f"cannot read segmenter file {path} ({torch_load_problem(path, exc)}): {fix}") from None
    if not isinstance(payload, dict) or payload.get("format") != SEGMENTER_FORMAT or "segmenter" not in payload:
        raise InnError(f"{path} is not a segmenter file (format {SEGMENTER_FORMAT}): {fix}")
    return payload["segmenter"]


def with_segmenter(payload: dict[str, Any], path: str | os.PathLike) -> dict[str, Any]:
    """A tagger file's ``payload`` with the segmenter of the segmenter file ``path`` beside its tagger.

    Raises:
        InnError: ``path`` is no segmenter file, or its language is not the tagger's.
    """
    state = read_segmenter_state(path)
    ours = (payload.get("data") or {}).get("language")
    theirs = (state.get("meta") or {}).get("language")
    if ours and theirs and ours.lower().split("_")[0] != theirs.lower().split("_")[0]:
        raise InnError(
            f"{path} segments {theirs} text but the tagger reads {ours}: give the segmenter trained on "
            "the tagger's treebank"
        )
    if not theirs and ours:
        state = {**state, "meta": {**(state.get("meta") or {}), "language": ours}}
    return {**payload, "segmenter": state}
