"""The tasks are records: what differs between POS and the walks is a field of their entries in
:data:`inn.registry.TASKS`, and no code outside the registry compares a task's name."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
from conftest import tiny_pos_config

import inn.models
import inn.registry
from inn.data.features import FeatureExtractor, feature_size
from inn.errors import InnError
from inn.models import ModelConfig, build_model
from inn.registry import TASKS, paper_task, tagging_task, task_spec

REPO = Path(__file__).resolve().parents[1]
#: a test of a task's name: ``task == "pos"``, ``runs.task != 'walks'``, ``"pos" if``, ``in ("pos",``
NAME_TEST = re.compile(
    r"""task *[!=]= *['"](pos|walks)|[!=]= *['"](pos|walks)['"]|['"](pos|walks)['"] *[!=]="""
    r"""|in \(['"](pos|walks)['"]|['"](pos|walks)['"] if"""
)


def name_tests(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if NAME_TEST.search(line)]


def test_the_scan_finds_the_name_tests_it_looks_for():
    assert name_tests(
        """if task == "pos":\nx = runs[runs.task == 'walks']\nm = "a" if t != "walks" else "b"\n"""
        """k = "pos" if a else "walks"\nif t in ("pos", "x"):\nlabel = "pos"\n"""
    ) == [
        'if task == "pos":',
        "x = runs[runs.task == 'walks']",
        'm = "a" if t != "walks" else "b"',
        'k = "pos" if a else "walks"',
        'if t in ("pos", "x"):',
    ]


def test_no_code_outside_the_task_registry_compares_a_tasks_name():
    found = {}
    for folder in ("src", "workflow"):
        for path in sorted((REPO / folder).rglob("*")):
            if path.suffix in (".py", ".smk") or path.name == "Snakefile":
                if path != REPO / "src/inn/registry.py" and (lines := name_tests(path.read_text(encoding="utf-8"))):
                    found[str(path.relative_to(REPO))] = lines
    assert not found, f"a task's name decides behaviour outside inn.registry (make it a TaskSpec field): {found}"


def test_each_task_scores_with_its_metric_in_its_direction():
    pos, walks = task_spec("pos"), task_spec("walks")
    assert (pos.dev_column, walks.dev_column) == ("dev_accuracy", "dev_error")
    assert pos.score(0.9) == pytest.approx(90.0) and walks.score(0.9) == pytest.approx(0.1)
    assert pos.better(91.0, 90.0) and not pos.better(89.0, 90.0) and pos.better(0.0, None)
    assert walks.better(0.1, 0.2) and not walks.better(0.3, 0.2) and walks.better(0.5, None)
    dev = pd.Series([0.3, 0.1, 0.2])
    assert pos.best(dev) == 0.3 and walks.best(dev) == 0.1


def test_each_task_names_its_data_files_and_output_width():
    assert task_spec("pos").data_files("d", ["train", "dev"]) == ["d/train.tsv", "d/dev.tsv", "d/features.json"]
    assert task_spec("walks").data_files("d", ["test"]) == ["d/test.pt"]
    assert task_spec("pos").output_width(17) == 17 and task_spec("walks").output_width(2) == 1


def test_the_feature_size_is_the_extractors_and_the_encoders():
    assert task_spec("pos").feature_size({"word_dim": 320, "affix_dim": 20}) == 448 == feature_size(320, 20)
    assert FeatureExtractor(word_dim=4, affix_dim=2).feature_size == task_spec("pos").feature_size(
        {"word_dim": 4, "affix_dim": 2}
    )
    assert task_spec("walks").feature_size is None  # a walk model's hidden size is always configured
    model = build_model(tiny_pos_config("gru", 3, num_classes=5))
    assert model.rnn_input_size == 4 + 6 * 2 + 8 and model.output.out_features == 5


def test_a_walk_model_has_one_logistic_unit_per_step():
    model = build_model(ModelConfig(task="walks", kind="gru", hidden_size=3, num_classes=2, input_dim=1))
    assert model.rnn_input_size == 1 and model.output.out_features == 1


def test_the_paper_tables_and_the_tagger_name_their_task():
    assert (paper_task(1), paper_task(2), tagging_task()) == ("walks", "pos", "pos")
    assert [spec.noun for spec in TASKS.values()] == ["tagging", "walk"]


def test_an_unknown_task_is_one_line():
    with pytest.raises(InnError, match="unknown task 'ner'; use one of pos, walks"):
        task_spec("ner")
    with pytest.raises(InnError, match="unknown task 'ner'"):
        ModelConfig(task="ner", kind="gru", hidden_size=3, num_classes=2)


def test_the_models_module_re_exports_the_registries():
    for name in (
        "MODELS",
        "CELLS",
        "ROLES",
        "TASKS",
        "ModelSpec",
        "CellSpec",
        "TaskSpec",
        "register",
        "register_cell",
        "model_with_role",
        "parse_model_name",
        "base_name",
        "FEATURES",
    ):
        assert getattr(inn.models, name) is getattr(inn.registry, name), name
