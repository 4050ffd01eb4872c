"""Shared fixtures: where the development corpora live, the tiny workflow configs, and small
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
import yaml
from snakemake.utils import update_config

from inn.data.corpora import EWT_FILES
from inn.data.download import DEV_EWT, DEV_NLTK

REPO = Path(__file__).resolve().parents[1]
#: where the fetch command puts the development corpora when INN_SHARED_DATA is not set
DEV_DATA = REPO / ".dev-data"
SHARED_DATA = Path(os.environ.get("INN_SHARED_DATA") or DEV_DATA)
#: the workflow tests' configs, one folder per scenario (the Snakemake workflow catalog's convention)
TEST_CONFIGS = REPO / ".test"


def pytest_collection_modifyitems(config, items: list[pytest.Item]) -> None:
    """The slowest first: the real-SLURM tests, then the other workflow runs, then the rest, each
    group in file order. With ``-n auto --dist loadfile`` a worker takes whole files in this
    order, so the SLURM test's minutes of waiting on jobs overlap with the other files."""

    def rank(item: pytest.Item) -> int:
        return 0 if item.get_closest_marker("slurm") else 1 if item.get_closest_marker("workflow") else 2

    items.sort(key=rank)  # stable: the order within a group stays the files' own


def _require(folder: str, *files: str) -> Path:
    """The corpus folder ``SHARED_DATA/folder`` if it holds ``files``; else the test fails
    saying how to get them."""
    path = SHARED_DATA / folder
    missing = [path / name for name in files if not (path / name).exists()]
    if missing:
        fetch = f"`inn download-dev-corpora --out-dir {SHARED_DATA}`"
        where = (
            f"INN_SHARED_DATA={SHARED_DATA} lacks it: point it at a folder holding the corpora, or run {fetch}"
            if os.environ.get("INN_SHARED_DATA")
            else f"run {fetch} once, or set INN_SHARED_DATA to a folder holding the corpora"
        )
        pytest.fail(f"development corpus missing: {missing[0]} ({where})")
    return path


@pytest.fixture(scope="session")
def ewt_dir() -> Path:
    return _require(DEV_EWT, *EWT_FILES.values())


@pytest.fixture(scope="session")
def nltk_data() -> Path:
    return _require(DEV_NLTK, "corpora/treebank.zip")


def tiny_test_config(*scenarios: str, ewt_dir: Path, nltk_data: Path) -> dict:
    """The workflow test configs ``.test/<scenario>/config.yaml``, merged in order as Snakemake
    merges ``--configfile`` files, with the development corpora's paths added (the machine's
    paths, which the files leave out)."""
    config: dict = {}
    for scenario in scenarios:
        update_config(config, yaml.safe_load((TEST_CONFIGS / scenario / "config.yaml").read_text(encoding="utf-8")))
    update_config(
        config,
        {
            "corpora": {
                "ewt": {split: str(ewt_dir / name) for split, name in EWT_FILES.items()},
                "ptb_sample": {"nltk_data": str(nltk_data)},
            }
        },
    )
    return config


@pytest.fixture
def tiny_config(ewt_dir, nltk_data) -> dict:
    """A workflow config that runs every rule in seconds (``.test/config``)."""
    return tiny_test_config("config", ewt_dir=ewt_dir, nltk_data=nltk_data)


@pytest.fixture
def tiny_workflow_config(ewt_dir, nltk_data) -> dict:
    """The whole workflow up to the report in a few minutes (``.test/quick`` over
    ``.test/config``)."""
    return tiny_test_config("config", "quick", ewt_dir=ewt_dir, nltk_data=nltk_data)


#: a two-sentence tagged corpus and feature sizes small enough for a GRU of 3 units to train in a second
TINY_TEXT = "The\tDT\ncat\tNN\nsat\tVBD\n.\t.\n\nA\tDT\ndog\tNN\nran\tVBD\n.\t.\n\n"
TINY_FEATURES = {"max_words": 50, "max_affixes": 20, "word_dim": 4, "affix_dim": 2}


def one_line(capsys) -> str:
    """What a command wrote to stderr, checked to be one line (the project's error form)."""
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    return err.rstrip("\n")


def tiny_corpus(folder: Path, text: str = TINY_TEXT) -> dict[str, Path]:
    """train/dev/test.tsv in ``folder``, three copies of ``text`` each (separate files)."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {split: folder / f"{split}.tsv" for split in ("train", "dev", "test")}
    for path in files.values():
        path.write_text(text * 3)
    return files


@pytest.fixture(scope="module")
def pos_dir(tmp_path_factory) -> Path:
    """The tiny corpus prepared (``inn prepare-pos``), once per test module."""
    from inn.experiment.prepare import prepare_pos

    out = tmp_path_factory.mktemp("pos") / "mine"
    prepare_pos("tsv", tiny_corpus(tmp_path_factory.mktemp("raw")), out, "mine", **TINY_FEATURES)
    return out


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
