"""The API reference builds from the docstrings and documents what a user extends.

docs/library.md (API reference) gives the command; this builds the same pages with
pdoc's Python API and reads them back as text: the layer, the cell protocol with every hook's
shapes and return values, the linearisation, the solve entry point and its statistics, and the
registries of models, cells and solvers.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import pdoc  # the test extra's: missing, the test fails rather than skips
import pytest

#: the library's modules, as docs/library.md's command lists them (``inn.experiment`` is the
#: workflow's, not the library's; packages with ``__all__`` hide their submodules, so those are named)
MODULES = (
    "inn",
    "inn.nn",
    "inn.nn.implicit_layer",
    "inn.nn.implicit_gru",
    "inn.nn.implicit_lstm",
    "inn.nn.implicit_function",
    "inn.solvers",
    "inn.solvers.anderson",
    "inn.models",
    "inn.registry",
    "inn.data",
    "inn.tagging",
    "inn.tagging.tagger",
    "inn.checkpoints",
    "inn.tagging.segmenter",
)

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict[str, dict[str, str]]:
    """Every built page, by its path under the output folder: the text of each documented
    object's section by its name (source views left out, so only the rendered docs count)."""
    out = tmp_path_factory.mktemp("api")
    pdoc.pdoc(*MODULES, output_directory=out)
    return {
        path.relative_to(out).as_posix(): sections(path.read_text(encoding="utf-8")) for path in out.rglob("*.html")
    }


def sections(page: str) -> dict[str, str]:
    """The text of each top-level ``<section id="...">`` of a pdoc page (a class's members
    inside its own), white space made single spaces so that phrases match across lines."""
    page = re.sub(r'<div class="pdoc-code codehilite">.*?</pre></div>', " ", page, flags=re.S)
    parts = re.split(r'<section id="([^"]+)">', page)
    return {
        name: re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", body)))
        for name, body in zip(parts[1::2], parts[2::2])
    }


def test_the_library_guide_gives_the_command_that_builds_these_pages():
    guide = (REPO / "docs" / "library.md").read_text(encoding="utf-8")
    assert f"pdoc {' '.join(MODULES)} -o build/api" in guide


def test_every_library_module_has_a_page(pages):
    for module in MODULES:
        assert module.replace(".", "/") + ".html" in pages, sorted(pages)
    assert not any(page.startswith("inn/experiment") for page in pages)


@pytest.mark.parametrize(
    "page, names",
    [
        ("inn/nn.html", ["ImplicitSequence", "ImplicitGRU", "ImplicitLSTM", "Cell", "GRUCell", "LSTMCell"]),
        ("inn/nn/implicit_layer.html", ["CellLinearization", "AutogradLinearization", "ImplicitSystem"]),
        (
            "inn/solvers.html",
            [
                "solve",
                "SolverStats",
                "ResultCode",
                "FixedPointSystem",
                "register_solver",
                "SolverSpec",
                "SolverOption",
                "SOLVERS",
            ],
        ),
        (
            "inn/registry.html",
            [
                "register",
                "ModelSpec",
                "register_cell",
                "CellSpec",
                "MODELS",
                "CELLS",
                "ROLES",
                "model_with_role",
                "TaskSpec",
                "TASKS",
                "task_spec",
            ],
        ),
        ("inn/tagging.html", ["Tagger", "PerceptronPeer", "read_text", "Tokenizer", "score_pos", "score_texts"]),
    ],
)
def test_the_key_objects_are_documented(pages, page, names):
    for name in names:
        assert name in pages[page], f"{page} lacks {name}"
        assert len(pages[page][name].split()) > 12, f"{page}: {name} has no docstring"


def test_the_cell_protocol_gives_every_hooks_shapes_and_returns(pages):
    cell = pages["inn/nn.html"]["Cell"]
    for phrase in [
        "forward(x, h_prev, h_next) -> h , (B, n, d), (B, n, K), (B, n, K) -> (B, n, K)",
        "transition(X, h_prev, h_next, *weights) -> (h, aux) , h (B, n, K)",
        "coupling(X, h_prev, h_next, aux) -> (lower, upper) , each (B, n, K)",
        "Linearization(system, H, evaluated)",
        "(prev, nxt, h, aux)",
        "step_from_zero(system) -> (H', residual) or None",
        "state_bound(h_start, h_end) -> bound",
        "the bound is (1, 1, K)",
        "weights may arrive in bfloat16",
        "supports_low_precision = True",
        "output(H)",
    ]:
        assert phrase in cell, phrase


def test_the_linearisation_the_solve_and_its_stats_say_what_they_are(pages):
    layer = pages["inn/nn/implicit_layer.html"]
    assert "built as (system, H, evaluated)" in layer["CellLinearization"]
    assert "J V = dF/dH . V, (B, n, K) -> (B, n, K)" in layer["CellLinearization"]
    solvers = pages["inn/solvers.html"]
    assert "def solve ( system : FixedPointSystem , method : str = 'anderson' , * , tol" in solvers["solve"]
    assert "(H, stats) : H (B, n, k)" in solvers["solve"]
    for field in ("newton_iterations", "krylov_iterations", "residual", "converged", "code", "num_failed"):
        assert f" {field} " in solvers["SolverStats"], field
    assert "function(system, H0, groups, counter, *, tol, max_iter, **options)" in solvers["SolverSpec"]
