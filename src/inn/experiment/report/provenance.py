"""The report's Provenance section and scale statement: the checkout's revision, the software and
the machine that render the report, the machines the runs trained on (read from what each run
recorded, :mod:`inn.experiment.provenance`), and how the configuration differs from the full
reproduction (the schema's defaults).
"""

from __future__ import annotations

import platform
import subprocess
from importlib import metadata
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from inn.experiment.config import validate_config

PACKAGES = ("torch", "numpy", "pandas", "snakemake", "nltk", "conllu", "matplotlib", "jinja2")


def git_revision(repo: Path) -> str:
    """The checkout's commit, with ``-dirty`` when it has uncommitted changes."""
    try:
        rev = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return rev + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"


def software_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def device_description() -> str:
    """The machine that renders the report (not the one that trained the runs: see
    :func:`training_devices`)."""
    if torch.cuda.is_available():
        return f"CUDA: {torch.cuda.get_device_name(0)} (and CPU {platform.processor() or platform.machine()})"
    return f"CPU only: {platform.processor() or platform.machine()}"


def _device_label(device, threads) -> str:
    """``cpu, 1 thread``, ``cpu, 2 threads`` or ``cuda NVIDIA H200`` (CPU threads matter little there)."""
    device = str(device)
    if device.startswith("cuda"):
        return device
    if pd.isna(threads):
        return f"{device}, threads not recorded"
    threads = int(threads)
    return f"{device}, {threads} thread{'s' if threads != 1 else ''}"


def training_devices(histories: pd.DataFrame, runs: pd.DataFrame) -> list[dict]:
    """Where the runs trained, read from their own files: one entry per device (``label``) with
    the number of runs that trained there (``runs``; a run that moved between machines counts
    under each), most runs first.

    Each history row records its epoch's device and threads. A history written before they were
    recorded (and the perceptron's) falls back on its run's metrics.json (the runs table), which
    holds the device of the last epoch only: ``from_metrics`` counts those runs.
    """
    counts: dict[str, dict] = {}
    recorded = set()
    keys = ["task", "dataset", "model", "seed"]

    def count(label: str, from_metrics: bool) -> None:
        entry = counts.setdefault(label, {"label": label, "runs": 0, "from_metrics": 0})
        entry["runs"] += 1
        entry["from_metrics"] += int(from_metrics)

    if not histories.empty and "device" in histories:
        for key, run in histories[histories.device.notna()].groupby(keys, sort=False):
            recorded.add(tuple(key))
            threads = run["threads"] if "threads" in run else pd.Series(np.nan, index=run.index)
            for label in dict.fromkeys(_device_label(d, t) for d, t in zip(run.device, threads)):
                count(label, False)
    if not runs.empty and "device" in runs:
        for row in runs.itertuples():
            if tuple(getattr(row, k) for k in keys) not in recorded and not pd.isna(row.device):
                count(_device_label(row.device, getattr(row, "threads", np.nan)), True)
    return sorted(counts.values(), key=lambda entry: -entry["runs"])


def scale_differences(config: dict, schema: Path) -> list[str]:
    """Settings of ``config`` that differ from the full reproduction (the schema's defaults).

    Where a corpus's files are, job resources and the scale label itself are not a matter of
    scale and are left out (the data summary gives every corpus's size); which corpora run, and
    how they are read (format, tag column), are: a corpus left out, another tag column or a
    corpus of the user's own is not the paper's experiment.
    """
    defaults = validate_config({}, schema)
    differences: list[str] = []

    def walk(ours, theirs, path):
        if isinstance(ours, dict) and isinstance(theirs, dict):
            for key in ours:
                if (path == "" and key in ("resources", "scale")) or (path.startswith("corpora.") and key in LOCATIONS):
                    continue
                if path == "corpora" and key not in theirs:
                    differences.append(f"corpora.{key}: a corpus of your own (full reproduction: {', '.join(theirs)})")
                    continue
                walk(ours[key], theirs.get(key), f"{path}.{key}" if path else key)
        elif ours != theirs:
            differences.append(f"{path} = {ours} (full reproduction: {theirs})")

    walk(config, defaults, "")
    return differences


#: corpus keys that say where its files are, not what it is
LOCATIONS = ("train", "dev", "test", "path", "nltk_data")
