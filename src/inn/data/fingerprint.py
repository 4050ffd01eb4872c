"""Fingerprints of prepared data folders: which data a model was trained on, by content.

A fingerprint is a hash of what a prepared folder holds, never of its path or of file times:
of the splits a model is trained on, and for POS of the vocabularies fitted on them. For POS
the bytes of ``train.tsv``, ``dev.tsv`` and ``features.json``; for walks the tensors of
``train.pt`` and ``dev.pt`` and their generator's settings (a torch file's bytes also depend on
the name it was written under). The same data prepared twice has the same fingerprint; a
folder re-prepared from other files has another, even with the same tag set and vocabulary
sizes. The test split is left out: it is not what a model learnt from, and a model is scored
on whatever test split sits beside the data it was trained on (a folder may even lack one
while it trains).

Every checkpoint stores the fingerprint of the data it was trained on (:mod:`inn.checkpoints`):
training checks it when it resumes, evaluation before it scores a split. The data stage also
records it, with the corpus's facts (its name, format and CoNLL-U tag column), in
``prepared.json``; folders prepared before that file existed get theirs computed from their
contents, which is what :func:`data_fingerprint` always does. Training and evaluation take a
folder's fingerprint through :func:`checked_fingerprint`, which refuses a folder whose files
no longer have the one recorded (a split edited or cut short, the tag list reordered).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from inn.errors import InnError

#: the record the data stage writes beside a prepared folder's splits
RECORD_NAME = "prepared.json"
#: the splits a model learns from (training) and is selected on (validation)
SPLITS = ("train", "dev")
#: how many hex digits of the SHA-256 a fingerprint keeps (64 bits: enough to tell data apart)
DIGITS = 16


def _pos_files(folder: Path) -> list[Path]:
    return [folder / f"{split}.tsv" for split in SPLITS] + [folder / "features.json"]


def _hash_walks(path: Path, digest: hashlib._Hash) -> None:
    from inn.data.walk import load_walks

    data = load_walks(path)
    for key in sorted(data):
        value = data[key]
        digest.update(key.encode())
        if hasattr(value, "numpy"):
            digest.update(str((value.dtype, tuple(value.shape))).encode())
            digest.update(value.contiguous().numpy().tobytes())
        else:
            digest.update(repr(value).encode())


def data_fingerprint(folder: str | os.PathLike) -> str:
    """The fingerprint of a prepared POS or walk folder, computed from its contents.

    Raises:
        InnError: the folder holds neither a prepared POS corpus nor a walk set, or lacks a split.
    """
    folder = Path(folder)
    digest = hashlib.sha256()
    if (folder / "features.json").is_file():
        for path in _pos_files(folder):
            if not path.is_file():
                raise InnError(f"prepared split not found: {path} (run the data stage first)")
            digest.update(path.name.encode() + b"\0")
            with open(path, "rb") as handle:
                for chunk in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(chunk)
    elif (folder / "train.pt").is_file():
        for split in SPLITS:
            path = folder / f"{split}.pt"
            if not path.is_file():
                raise InnError(f"walk file not found: {path} (run the data stage first)")
            digest.update(path.name.encode() + b"\0")
            _hash_walks(path, digest)
    else:
        raise InnError(
            f"{folder} is not a prepared data folder (no features.json or train.pt in it): run the data stage first"
        )
    return digest.hexdigest()[:DIGITS]


def checked_fingerprint(folder: str | os.PathLike) -> str:
    """The fingerprint of a prepared folder (:func:`data_fingerprint`), checked against the one
    its ``prepared.json`` records (a folder prepared before that file: unchecked).

    Raises:
        InnError: its files changed since the data stage wrote them (edited, cut short,
            reordered, damaged; a ``features.json`` that cannot be read is named as such).
    """
    fingerprint = data_fingerprint(folder)
    recorded = read_record(folder).get("fingerprint")
    if recorded is not None and recorded != fingerprint:
        features = Path(folder) / "features.json"
        if features.is_file():
            from inn.data.features import FeatureExtractor

            FeatureExtractor.load(features)  # one line naming a damaged file and the fix
        raise InnError(
            f"{folder} changed since the data stage prepared it (fingerprint {fingerprint}, "
            f"{Path(folder) / RECORD_NAME} records {recorded}): a split or features.json was "
            "edited or damaged; prepare the data again"
        )
    return fingerprint


def write_record(folder: str | os.PathLike, **facts: Any) -> str:
    """Record the folder's fingerprint and ``facts`` (corpus, format, column ...) in
    ``prepared.json`` (atomically); returns the fingerprint. Call it after the splits are written."""
    from inn.io import write_json

    fingerprint = data_fingerprint(folder)
    write_json(Path(folder) / RECORD_NAME, {"fingerprint": fingerprint, **facts})
    return fingerprint


def read_record(folder: str | os.PathLike) -> dict[str, Any]:
    """What ``prepared.json`` records (``{}`` for a folder prepared before it existed).

    Its ``fingerprint`` says what the folder held when it was prepared; :func:`data_fingerprint`
    says what it holds now.
    """
    path = Path(folder) / RECORD_NAME
    if not path.is_file():
        return {}
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InnError(f"cannot read {path} ({exc}); prepare the data again") from None
    if not isinstance(record, dict):
        raise InnError(f"{path} is not a JSON object; prepare the data again")
    return record
