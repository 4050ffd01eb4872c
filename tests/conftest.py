"""Shared fixtures: where the development corpora live, and a tiny workflow config.

The corpora are never copied into the repository: tests read them from ``../shared/data``
beside the checkout, or from ``INN_SHARED_DATA`` (CI sets it).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("INN_SHARED_DATA", REPO.parent / "shared" / "data"))


def _require(path: Path) -> Path:
    if not path.exists():
        pytest.fail(f"development corpus missing: {path} (set INN_SHARED_DATA to the shared data folder)")
    return path


@pytest.fixture(scope="session")
def ewt_dir() -> Path:
    return _require(SHARED_DATA / "ud-english-ewt")


@pytest.fixture(scope="session")
def nltk_data() -> Path:
    return _require(SHARED_DATA / "nltk_data")


@pytest.fixture
def tiny_config(tmp_path, ewt_dir, nltk_data) -> dict:
    """A workflow config that runs every data rule in seconds."""
    return {
        "corpora": {
            "ewt": {"path": str(ewt_dir)},
            "ptb_sample": {"nltk_data": str(nltk_data)},
        },
        "features": {"max_words": 5000, "max_affixes": 500, "word_dim": 16, "affix_dim": 4},
        "walks": {"b": [1.0, 0.5], "dim": 4, "sizes": {"train": 60, "dev": 20, "test": 20}},
    }
