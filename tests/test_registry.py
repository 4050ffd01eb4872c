"""The model registry is the one list of models: the schema, the rules, the tables and the
report read it, so adding a model to the experiments is one entry."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import tiny_pos_config
from test_workflow import REPO, SNAKEMAKE

from inn.errors import InnError
from inn.experiment.config import load_schema, validate_config
from inn.models import MODELS, ROLES, ModelSpec, build_model, model_with_role, register
from inn.tables import read_tsv, write_tsv

SCHEMA = REPO / "workflow/schemas/config.schema.yaml"


def test_the_schemas_model_lists_are_the_registrys():
    """The schema file's lists document the models (validation takes them from the registry)."""
    models = load_schema(SCHEMA)["properties"]["models"]["properties"]
    for task in ("pos", "walks"):
        assert models[task]["properties"]["run"]["items"]["enum"] == [
            name for name, spec in MODELS.items() if task in spec.tasks
        ]


#: a model the experiments do not have: a unidirectional GRU of the POS baselines' size, under its own name
REGISTER = """
from inn.models import ModelSpec, register
register(ModelSpec("gru_wide", "GRU (wide)", "gru", sizes={"pos": ("baseline_hidden_size",)}))
"""


def test_a_model_registered_alone_runs_through_the_workflow(tmp_path, tiny_config):
    """One registry entry, nothing else: the config accepts the model, the rules plan its training,
    evaluation and timing, and the tables and report wait for it."""
    tiny_config["models"]["pos"]["run"] = ["inn", "gru_wide"]
    tiny_config["models"]["walks"]["run"] = []
    tiny_config["corpora"]["ewt"]["enabled"] = False
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(tiny_config))
    command = SNAKEMAKE[3:] + [
        "-n",
        "--cores",
        "1",
        "--directory",
        str(tmp_path),
        "--configfile",
        str(tmp_path / "config.yaml"),
    ]
    script = REGISTER + f"import sys\nfrom snakemake.cli import main\nsys.argv = ['snakemake', *{command!r}]\nmain()\n"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    assert "results/train/pos/ptb_sample/gru_wide/seed1/checkpoint.pt" in out
    assert "results/eval/pos/ptb_sample/gru_wide/seed1/metrics.json" in out
    assert "results/timing/pos/ptb_sample/gru_wide/seed1.tsv" in out
    # Without the entry the same config is refused by the schema, naming the key.
    plain = subprocess.run(
        [sys.executable, "-c", script.replace(REGISTER, "")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert plain.returncode != 0 and "models.pos.run.1: 'gru_wide' is not one of" in plain.stdout + plain.stderr


def test_a_registered_model_builds_and_tags():
    spec = register(ModelSpec("bigru_test", "BiGRU (test)", "gru", bidirectional=True, sizes={"pos": ()}))
    try:
        cfg = tiny_pos_config(spec.name, 5)
        model = build_model(cfg)
        assert model.rnn.output_size == 10 and not cfg.implicit
    finally:
        del MODELS[spec.name]


def _collect(root: Path, *runs: tuple) -> Path:
    """Tables of fake runs (test_report.fake_run: task, dataset, model, seed, test score, dev
    scores, metrics), with a floor for the walks at b = 0.5 and 1."""
    from test_report import collect_fake_runs, fake_floor, fake_run

    files = [fake_run(root, *run[:6], **(run[6] if len(run) > 6 else {})) for run in runs]
    floors = [
        fake_floor(root, dataset, error, b=float(dataset[1:])) for dataset, error in (("b0.5", 0.1), ("b1", 0.05))
    ]
    return collect_fake_runs(root / "tables", files, floors)


#: walks at two b and tagging: the INN, a model of one's own, the b-LSTM sweep and the BiGRU
RUNS = [
    ("walks", b, model, 1, error, [error])
    for b, scores in (("b0.5", (0.12, 0.13, 0.15)), ("b1", (0.06, 0.065, 0.07)))
    for model, error in zip(("inn", "mine", "bilstm-h100"), scores)
] + [
    ("pos", "ewt", model, 1, accuracy, [accuracy])
    for model, accuracy in (("inn", 93.5), ("mine", 93.0), ("bigru", 92.5))
]


def test_a_model_of_ones_own_gets_columns_rows_and_comparisons_but_no_verdict(tmp_path, registry):
    """Table 1's column groups, the comparisons and the report's colours come from the registry;
    the verdicts stay the paper's claims: the INN against the b-LSTM and the BiGRU."""
    from inn.experiment.report import table1_figure
    from inn.experiment.views import table1_view

    register(
        ModelSpec(
            "mine",
            "Mine (not in the paper)",
            "implicit_gru",
            bidirectional=True,
            implicit=True,
            in_paper=False,
            short="mine",
            sizes={"walks": ("inn_hidden_size",)},
        )
    )
    tables = _collect(tmp_path, *RUNS)
    table1 = read_tsv(tables / "table1.tsv")
    groups = [c.removesuffix("_error") for c in table1.columns if c.endswith("_error") and "paper" not in c]
    assert groups == ["inn", "inn_lstm", "mine", "bilstm"]
    assert table1.set_index("b").loc[0.5, "mine_error"] == pytest.approx(0.13)
    headers = [name for name, _ in table1_view(table1).columns]
    assert headers[2:8] == [
        "INN error",
        "INN excess [95% CI]",
        "mine error",
        "mine excess [95% CI]",
        "b-LSTM error",
        "b-LSTM excess [95% CI]",
    ]
    assert "paper: INN" in headers and "b-LSTM size (best on dev)" in headers
    comparisons = read_tsv(tables / "comparisons.tsv")
    pairs = {(r.dataset, r.model, r.baseline) for r in comparisons.itertuples()}
    assert {
        ("b0.5", "mine", "bayes"),
        ("b0.5", "mine", "bilstm-h100"),
        ("ewt", "mine", "bigru"),
        ("ewt", "mine", "inn"),
    } <= pairs
    verdict = read_tsv(tables / "verdict.tsv")
    assert set(verdict.model) == {"inn"} and set(verdict.baseline) == {"bilstm-h100", "bigru", "bilstm"}
    assert verdict.claim.tolist() == [
        "INN error below the b-LSTM's (b = 0.5)",
        "INN error below the b-LSTM's (b = 1)",
        "INN accuracy above the Bidirectional GRU's (ewt)",
        "INN error below the b-LSTM's for b <= 1, as a whole",
    ]
    assert table1_figure(table1).startswith("data:image/png")


def test_the_roles_not_the_names_decide_the_claims(tmp_path, registry):
    """Moved to another model, the claimed role takes the verdicts, Table 1's first columns and
    the paper's timing law with it; and a role is one model's."""
    from inn.experiment.views import table1_models

    with pytest.raises(InnError, match="^model mine: the role claimed is inn's "):
        register(ModelSpec("mine", "Mine", "implicit_gru", bidirectional=True, implicit=True, role="claimed"))
    with pytest.raises(InnError, match="^model mine: unknown role 'paper'; use one of claimed, swept, timing_ref"):
        register(ModelSpec("mine", "Mine", "implicit_gru", bidirectional=True, implicit=True, role="paper"))
    assert [model_with_role(role) for role in ROLES] == ["inn", "bilstm", "bigru"]
    # A module of one's own cannot replace the INN (nor take its role): the config check says so, in one line.
    (tmp_path / "replaces_inn.py").write_text(
        "import dataclasses\nfrom inn.models import MODELS, register\n"
        "register(dataclasses.replace(MODELS['inn'], display='My INN', role=None))\n"
    )
    inn = MODELS["inn"]
    with pytest.raises(InnError) as error:
        validate_config({"imports": [str(tmp_path / "replaces_inn.py")]}, load_schema(SCHEMA))
    assert str(error.value) == (
        f"config: imports.0: module {tmp_path / 'replaces_inn.py'} failed to import: InnError: model inn is the "
        "package's own and cannot be replaced: register yours under another name (e.g. my_inn)"
    )
    assert MODELS["inn"] is inn
    # The tables follow the role wherever it is (moved here by hand, as no registration can).
    MODELS["inn"] = dataclasses.replace(inn, role=None)
    register(
        ModelSpec(
            "mine",
            "Mine",
            "implicit_gru",
            bidirectional=True,
            implicit=True,
            role="claimed",
            sizes={"walks": ("inn_hidden_size",)},
        )
    )
    tables = _collect(tmp_path, *RUNS)
    verdict = read_tsv(tables / "verdict.tsv")
    assert set(verdict.model) == {"mine"}
    assert verdict.claim.iloc[0] == "Mine error below the b-LSTM's (b = 0.5)"
    assert verdict.paper_difference.isna().all()  # the paper has no figures for it
    table1 = read_tsv(tables / "table1.tsv")
    assert [name for name, _ in table1_models(table1)] == ["mine", "inn", "bilstm"]
    assert "paper_mine_error" in table1 and "paper_inn_error" not in table1
    from inn.experiment.timing import fit_timing_main

    measured = tmp_path / "m.tsv"
    n = np.array([10, 20, 40])
    write_tsv(
        measured,
        pd.DataFrame(
            {
                "task": "walks",
                "dataset": "b0.5",
                "model": np.repeat(["inn", "mine"], 3),
                "n": np.tile(n, 2),
                "seconds": np.tile(0.01 * n**1.5, 2),
            }
        ),
    )
    fit_timing_main(["--out", str(tmp_path / "fits.tsv"), "--measurements", str(tmp_path / "all.tsv"), str(measured)])
    fits = read_tsv(tmp_path / "fits.tsv").set_index("model")
    assert fits.loc["mine", "paper_a"] == 0.17 and np.isnan(fits.loc["inn", "paper_a"])
