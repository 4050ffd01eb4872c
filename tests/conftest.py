"""Shared fixtures and helpers: where the development corpora live, the tiny workflow configs,
small implicit layers (float64 by default, deterministic seeds), and what several test files
build alike (tiny corpora, walks, runs and taggers, and the command lines of ``inn train``,
``inn benchmark`` and ``inn collect``). Test files import the helpers: ``from conftest import ...``.

The corpora are never copied into the repository and tests never download them: they are read
from ``INN_SHARED_DATA`` when it is set (CI sets it), else from the checkout's git-ignored
``.dev-data``, which ``inn download-dev-corpora --out-dir .dev-data`` fills.
"""

from __future__ import annotations

import csv
import os
import sys
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


@pytest.fixture
def tiny_slurm_config(ewt_dir, nltk_data) -> dict:
    """The default target with one model a task (``.test/slurm`` over ``.test/quick``): every
    rule through SLURM in as few jobs as cover them."""
    return tiny_test_config("config", "quick", "slurm", ewt_dir=ewt_dir, nltk_data=nltk_data)


#: a two-sentence tagged corpus and feature sizes small enough for a GRU of 3 units to train in a second
TINY_TEXT = "The\tDT\ncat\tNN\nsat\tVBD\n.\t.\n\nA\tDT\ndog\tNN\nran\tVBD\n.\t.\n\n"
TINY_FEATURES = {"max_words": 50, "max_affixes": 20, "word_dim": 4, "affix_dim": 2}
#: the first of those sentences as CoNLL-U, their PTB tags in XPOS
TINY_CONLLU = (
    "1\tThe\tthe\tDET\tDT\t_\t2\tdet\t_\t_\n2\tcat\tcat\tNOUN\tNN\t_\t3\tnsubj\t_\t_\n"
    "3\tsat\tsit\tVERB\tVBD\t_\t0\troot\t_\t_\n4\t.\t.\tPUNCT\t.\t_\t3\tpunct\t_\t_\n\n"
)


def tiny_pos_config(kind: str, hidden_size: int, num_classes: int = 3):
    """The :class:`inn.models.ModelConfig` of a POS model of tiny sizes: 10 words, 4 of each of the
    6 affix kinds, words in 4 dimensions and affixes in 2."""
    from inn.models import ModelConfig

    return ModelConfig(
        task="pos",
        kind=kind,
        hidden_size=hidden_size,
        num_classes=num_classes,
        word_vocab=10,
        affix_vocab=(4,) * 6,
        word_dim=4,
        affix_dim=2,
    )


def train_argv(task: str, data: Path, model: str, out_dir: Path, *options: str) -> list[str]:
    """``inn train``'s command line: ``model`` on the prepared ``data`` of ``task`` into ``out_dir``."""
    return ["train", "--task", task, "--data", str(data), "--model", model, "--out-dir", str(out_dir), *options]


def evaluate_argv(checkpoint: Path, data: Path, out_dir: Path, *options: str | Path) -> list[str]:
    """``inn evaluate``'s command line: the model file ``checkpoint`` on the prepared ``data``, into ``out_dir``."""
    return [
        "evaluate",
        "--checkpoint",
        str(checkpoint),
        "--data",
        str(data),
        "--out-dir",
        str(out_dir),
        *map(str, options),
    ]


def export_argv(checkpoint: Path, out: Path, *options: str | Path) -> list[str]:
    """``inn export-tagger``'s command line: the model file ``checkpoint`` as the tagger file ``out``."""
    return ["export-tagger", "--checkpoint", str(checkpoint), "--out", str(out), *map(str, options)]


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


def prepare_argv(files: dict[str, Path], out_dir: Path, corpus: str = "c") -> list[str]:
    """``inn prepare-pos``'s command line: the word<TAB>tag ``files`` (split -> file) into ``out_dir``."""
    return [
        "prepare-pos",
        "--corpus",
        corpus,
        "--format",
        "tsv",
        *[f"--{s}={p}" for s, p in files.items()],
        "--out-dir",
        str(out_dir),
    ]


@pytest.fixture(scope="module")
def pos_dir(tmp_path_factory) -> Path:
    """The tiny corpus prepared (``inn prepare-pos``), once per test module."""
    from inn.experiment.prepare import prepare_pos

    out = tmp_path_factory.mktemp("pos") / "mine"
    prepare_pos("tsv", tiny_corpus(tmp_path_factory.mktemp("raw")), out, "mine", **TINY_FEATURES)
    return out


@pytest.fixture(scope="module")
def gru_run(tmp_path_factory, pos_dir) -> Path:
    """A finished run of a tiny GRU (3 units, one epoch) on ``pos_dir``, once per test module."""
    from inn.experiment.train import TrainConfig, train

    out = tmp_path_factory.mktemp("run")
    train(
        "pos",
        pos_dir,
        "gru",
        out,
        TrainConfig(max_epochs=1),
        {"hidden_size": 3},
        device="cpu",
        meta={"seed": 1, "dataset": "mine"},
    )
    return out


def tiny_walks(
    out: Path, sizes: tuple[int, int, int] = (60, 20, 20), max_len: int = 12, settings: bool = False
) -> Path:
    """A walks dataset in ``out``: train/dev/test.pt of ``sizes`` walks at b = 1 in three
    dimensions (seeds 1, 2, 3); with ``settings``, the generator's settings stored beside the
    walks, as ``inn generate-walks`` stores them."""
    from inn.data.walk import generate_walks, save_walks

    for split, n, seed in zip(("train", "dev", "test"), sizes, (1, 2, 3)):
        walks = generate_walks(n, b=1.0, dim=3, seed=seed, max_len=max_len)
        meta = {"b": 1.0, "dim": 3, "seed": seed, "direction": "gaussian", "max_len": max_len} if settings else {}
        save_walks(out / f"{split}.pt", walks, **meta)
    return out


def first_sentences(path: Path, count: int) -> str:
    """The first ``count`` sentences (blank-line separated blocks) of a CoNLL-U file."""
    return "\n\n".join(path.read_text(encoding="utf-8").split("\n\n")[:count]) + "\n\n"


def conllu_source(train: Path, dev: Path, test: Path) -> dict[str, str]:
    """A CoNLL-U corpus source of ``prepare_pos``: the three split files, XPOS tags."""
    return {"tags": "xpos", "train": str(train), "dev": str(dev), "test": str(test)}


def tiny_bilstm_tagger(root: Path, source: dict[str, str], features: dict, hidden: int, **training) -> Path:
    """The checkpoint of a BiLSTM of ``hidden`` units trained one epoch on an English CoNLL-U
    ``source`` (prepared with ``features`` into ``root/data``; run in ``root/bilstm``)."""
    from inn.experiment.prepare import prepare_pos
    from inn.experiment.train import TrainConfig, train

    prepare_pos("conllu", source, root / "data", "ewt", language="en", **features)
    train(
        "pos",
        root / "data",
        "bilstm",
        root / "bilstm",
        TrainConfig(max_epochs=1, **training),
        {"hidden_size": hidden},
        device="cpu",
        meta={"dataset": "ewt", "seed": 1, "scale": "test"},
    )
    return root / "bilstm" / "checkpoint.pt"


@pytest.fixture
def registry():
    """Undo what a test registers in the model and cell registries."""
    from inn.models import CELLS, MODELS

    models, cells = dict(MODELS), dict(CELLS)
    yield
    MODELS.clear(), MODELS.update(models)
    CELLS.clear(), CELLS.update(cells)


@pytest.fixture
def imported(registry):
    """Undo what importing a user's module leaves: its registrations, modules and path entries."""
    modules, path = set(sys.modules), list(sys.path)
    yield
    for name in set(sys.modules) - modules:
        del sys.modules[name]
    sys.path[:] = path


#: a benchmark of a second: 4 units, sequences of 3 steps, batches of 2, one repeat
TINY_BENCHMARK = "--hidden 4 --lengths 3 --batch-size 2 --repeats 1"


def benchmark_rows(out: Path, *options: str | Path) -> list[dict]:
    """Runs ``inn benchmark OPTIONS --out OUT`` (a string of ``options`` split at spaces, a path
    kept whole) and returns the rows it wrote."""
    from inn.experiment.cli import main

    argv = [word for part in options for word in (part.split() if isinstance(part, str) else [str(part)])]
    assert main(["benchmark", *argv, "--out", str(out)]) == 0, f"inn benchmark {' '.join(argv)} failed"
    return list(csv.DictReader(out.open(), delimiter="\t"))


def collect_tables(out: Path, metrics, histories, predictions, floors, floor_predictions, corpora) -> Path:
    """Runs ``inn collect`` on the given run files (lists of paths) into ``out``."""
    from inn.experiment.collect import main

    groups = {
        "--metrics": metrics,
        "--histories": histories,
        "--predictions": predictions,
        "--floors": floors,
        "--floor-predictions": floor_predictions,
        "--corpora": corpora,
    }
    main([*(word for option, paths in groups.items() for word in (option, *map(str, paths))), "--out-dir", str(out)])
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


def assert_padding_invariance(layer) -> torch.Tensor:
    """An implicit layer on a padded batch: padded positions are zero, whatever their input, and
    each sequence's states are those it has alone. Returns the batch's states."""
    xi, mask = make_batch(B=3, n=7, lengths=[7, 4, 2])
    xi_garbage = xi.clone()
    xi_garbage[~mask] = 1e3  # padded inputs must not matter
    H = layer(xi_garbage, mask)
    assert (H[~mask] == 0).all() and (layer.last_solution[~mask] == 0).all()
    for b, length in enumerate([7, 4, 2]):
        alone = layer(xi[b : b + 1, :length], mask[b : b + 1, :length])
        assert torch.allclose(H[b, :length], alone[0], atol=1e-9)
    return H


def assert_padding_invariance_of_gradients(layer) -> None:
    """An implicit layer's input gradients: zero at padded positions, and a padded sequence's
    those it has alone."""
    xi, mask = make_batch(B=2, n=5, lengths=[5, 3])
    xi.requires_grad_(True)
    layer(xi, mask).pow(2).sum().backward()
    g_batch = xi.grad[1, :3].clone()
    assert (xi.grad[1, 3:] == 0).all()
    x1 = xi[1:, :3].detach().clone().requires_grad_(True)
    layer(x1, mask[1:, :3]).pow(2).sum().backward()
    assert torch.allclose(g_batch, x1.grad[0], atol=1e-8)


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
