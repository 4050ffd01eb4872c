"""Shared fixtures: where the development corpora live, a tiny workflow config, and small
implicit layers (float64 by default, deterministic seeds).

The corpora are never copied into the repository and tests never download them: they are read
from ``INN_SHARED_DATA`` when it is set (CI sets it), else from the checkout's git-ignored
``.dev-data``, which ``inn download-dev-corpora --out-dir .dev-data`` fills.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from inn.data.corpora import EWT_FILES
from inn.data.download import DEV_EWT, DEV_NLTK

REPO = Path(__file__).resolve().parents[1]
#: where the fetch command puts the development corpora when INN_SHARED_DATA is not set
DEV_DATA = REPO / ".dev-data"
SHARED_DATA = Path(os.environ.get("INN_SHARED_DATA") or DEV_DATA)


def _require(folder: str, *files: str) -> Path:
    """The corpus folder ``SHARED_DATA/folder`` if it holds ``files``; else the test fails
    saying how to get them."""
    path = SHARED_DATA / folder
    missing = [path / name for name in files if not (path / name).exists()]
    if missing:
        fetch = f"`inn download-dev-corpora --out-dir {SHARED_DATA}`"
        where = (f"INN_SHARED_DATA={SHARED_DATA} lacks it: point it at a folder holding the corpora, or run {fetch}"
                 if os.environ.get("INN_SHARED_DATA") else
                 f"run {fetch} once, or set INN_SHARED_DATA to a folder holding the corpora")
        pytest.fail(f"development corpus missing: {missing[0]} ({where})")
    return path


@pytest.fixture(scope="session")
def ewt_dir() -> Path:
    return _require(DEV_EWT, *EWT_FILES.values())


@pytest.fixture(scope="session")
def nltk_data() -> Path:
    return _require(DEV_NLTK, "corpora/treebank.zip")


@pytest.fixture
def tiny_config(tmp_path, ewt_dir, nltk_data) -> dict:
    """A workflow config that runs every rule in seconds (tiny data, models and timings)."""
    return {
        "corpora": {
            "ewt": {"format": "conllu", "tags": "xpos",
                    **{split: str(ewt_dir / f"en_ewt-ud-{split}.conllu") for split in ("train", "dev", "test")}},
            "ptb_sample": {"format": "nltk_treebank", "nltk_data": str(nltk_data)},
        },
        "features": {"max_words": 5000, "max_affixes": 500, "word_dim": 16, "affix_dim": 4},
        "walks": {"b": [1.0, 0.5], "dim": 4, "sizes": {"train": 60, "dev": 20, "test": 20}},
        # `rule all` trains, evaluates and times every configured model: keep them tiny too
        "models": {
            "pos": {"baseline_hidden_size": 6, "perceptron_iterations": 1},
            "walks": {"inn_hidden_size": 5, "bilstm_hidden_sizes": [4]},
        },
        "solver": {"max_iter": 10, "krylov_max_iter": 10},
        "training": {"pos": {"max_epochs": 1, "max_train": 30, "max_dev": 10},
                     "walks": {"max_epochs": 1, "max_train": 30, "max_dev": 10}},
        "resources": {"threads": 1, "mem_mb": 1000, "runtime": 10},
        "timing": {"lengths": [4, 8], "repeats": 1, "benchmark": {"methods": ["paper", "newton_krylov"], "repeats": 1}},
    }


@pytest.fixture
def tiny_workflow_config(tiny_config) -> dict:
    """The whole workflow up to the report in a minute or two: NLTK's sample and the b = 0.5
    walks only, and fewer models."""
    corpora, models = tiny_config["corpora"], tiny_config["models"]
    return {
        **tiny_config,
        "scale": "test",
        "device": "cpu",
        "corpora": {**corpora, "ewt": {**corpora["ewt"], "enabled": False}},
        "walks": {**tiny_config["walks"], "b": [0.5]},
        "models": {"pos": {**models["pos"], "run": ["inn", "bilstm", "perceptron"]},
                   "walks": {**models["walks"], "run": ["inn", "bilstm"]}},
    }


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


def make_layer(input_size=5, hidden=6, scale=1.0, dtype=torch.float64, **options):
    """A small ImplicitGRU; ``scale`` multiplies the recurrent weights (harder systems)."""
    from inn.nn import ImplicitGRU

    layer = ImplicitGRU(input_size, hidden, **options).to(dtype)
    with torch.no_grad():
        for p in (layer.weight_pn, layer.weight_zr, layer.weight_c):
            p.mul_(scale)
    return layer


def make_batch(B=3, n=6, input_size=5, lengths=None, dtype=torch.float64):
    xi = torch.randn(B, n, input_size, dtype=dtype)
    mask = torch.ones(B, n, dtype=torch.bool)
    if lengths is not None:
        for b, length in enumerate(lengths):
            mask[b, length:] = False
    return xi, mask


def assert_gradcheck(layer, xi, mask) -> None:
    """float64 gradcheck of an implicit layer's output against its input and every parameter
    (one at a time, through ``torch.func.functional_call``): the implicit backward's gradients
    against finite differences."""
    xi = xi.detach().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x: layer(x, mask), (xi,), atol=1e-7, rtol=1e-6)
    for name, p in layer.named_parameters():
        def functional(v, name=name):
            return torch.func.functional_call(layer, {name: v}, (xi.detach(), mask))

        v = p.detach().clone().requires_grad_(True)
        assert torch.autograd.gradcheck(functional, (v,), atol=1e-7, rtol=1e-6), name
