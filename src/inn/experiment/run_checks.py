"""Whether a run's evaluation files can be believed: its ``metrics.json`` is the JSON object
``inn evaluate`` writes, and says what its predictions say.

``inn evaluate`` writes ``predictions.tsv`` and ``metrics.json`` as one unit, the metrics naming
the SHA-256 of the predictions they were computed from (``predictions_sha256``). ``inn collect``
checks both: the digest where the metrics name one, and always the metric itself (token
accuracy or step error), recomputed from the predictions, so that neither predictions written
beside the metrics of another evaluation nor a score set by hand reach the tables. Metrics
written before they named the digest are checked by their metric alone, with a warning.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import logging
import math
import os
from pathlib import Path
from typing import Any

import pandas as pd

from inn.errors import InnError

log = logging.getLogger(__name__)

#: the key of ``metrics.json`` that names the digest of its predictions
PREDICTIONS_DIGEST = "predictions_sha256"
#: how far a recomputed metric may differ from the one recorded (float rounding alone)
TOLERANCE = 1e-9
FIX = "evaluate the run again (inn evaluate, or rerun its workflow job)"


def sha256_hex(data: bytes) -> str:
    """The SHA-256 of ``data`` in hex."""
    return hashlib.sha256(data).hexdigest()


def read_metrics(path: str | os.PathLike) -> dict[str, Any]:
    """A run's ``metrics.json``.

    Raises:
        InnError: the file cannot be read, is empty, is not JSON, or holds no JSON object.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InnError(f"cannot read {path} ({getattr(exc, 'strerror', None) or exc}); {FIX}") from None
    if not text.strip():
        raise InnError(f"{path} is empty, not the metrics inn evaluate writes; {FIX}")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InnError(f"{path} is not JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); {FIX}") from None
    if not isinstance(data, dict):
        raise InnError(
            f"{path} holds a JSON {type(data).__name__}, not the object of metrics inn evaluate writes; {FIX}"
        )
    return data


def _predictions_bytes(path: str | os.PathLike) -> bytes:
    """The bytes of ``predictions.tsv`` as written, from its gzip-compressed copy where given one."""
    try:
        if str(path).endswith(".gz"):
            with gzip.open(path, "rb") as handle:
                return handle.read()
        return Path(path).read_bytes()
    except (OSError, EOFError) as exc:
        raise InnError(f"cannot read {path} ({getattr(exc, 'strerror', None) or exc}); {FIX}") from None


def check_predictions(label: str, metrics: dict[str, Any], predictions: str | os.PathLike) -> bool:
    """Refuse a run (``label``) whose metrics contradict its ``predictions``; returns whether
    the metrics named the predictions' digest (False: an older metrics.json, checked by its
    metric alone).

    Raises:
        InnError: the digest differs, or the metric recomputed from the predictions differs.
    """
    data = _predictions_bytes(predictions)
    named = metrics.get(PREDICTIONS_DIGEST)
    if isinstance(named, str) and named != sha256_hex(data):
        raise InnError(
            f"{label}: its metrics.json was computed from other predictions than {predictions} (sha256 "
            f"{named[:16]}..., the file's {sha256_hex(data)[:16]}...; an evaluation that failed half "
            f"way, or a file replaced since); {FIX}"
        )
    metric = metrics.get("metric")
    if metric in ("accuracy", "error") and metrics.get(metric) is not None:
        table = pd.read_csv(io.BytesIO(data), sep="\t", usecols=["gold", "predicted"], dtype=str, keep_default_na=False)
        wrong = float((table.gold != table.predicted).mean()) if len(table) else math.nan
        recomputed = 100.0 * (1.0 - wrong) if metric == "accuracy" else wrong
        if not math.isclose(recomputed, float(metrics[metric]), rel_tol=TOLERANCE, abs_tol=TOLERANCE):
            raise InnError(
                f"{label}: its metrics.json says {metric} {metrics[metric]} but its predictions "
                f"({predictions}) give {recomputed:.6g}: the two files contradict each other; {FIX}"
            )
    return isinstance(named, str)
