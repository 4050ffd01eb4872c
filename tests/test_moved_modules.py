"""The modules that moved into ``inn.tagging`` and the experiment's stage packages keep their old
import paths for a release: an old path gives the moved module itself, and an old module that a
stage package replaced (``inn.experiment.train``) gives its names from that package."""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys

import pytest

from inn._moved import MOVED

#: stage package (the old module's path) -> the module its old code moved to
STAGES = {
    "inn.experiment.train": "inn.experiment.train.loop",
    "inn.experiment.timing": "inn.experiment.timing.fits",
    "inn.experiment.report": "inn.experiment.report.html",
}


@pytest.mark.parametrize("old, new", sorted(MOVED.items()))
def test_an_old_path_gives_the_moved_module_itself(old, new):
    sys.modules.pop(old, None)
    assert importlib.import_module(old) is importlib.import_module(new)
    parent, _, name = old.rpartition(".")
    assert getattr(importlib.import_module(parent), name) is importlib.import_module(new)


def test_setting_a_name_through_an_old_path_sets_it_where_the_code_runs(monkeypatch):
    import inn.experiment.evaluate as old
    from inn.experiment.train import evaluate as new

    monkeypatch.setattr(old, "write_json", "patched")
    assert new.write_json == "patched"


@pytest.mark.parametrize("package, moved", sorted(STAGES.items()))
def test_a_stage_package_gives_the_names_of_the_old_module_it_replaced(package, moved):
    stage, module = importlib.import_module(package), importlib.import_module(moved)
    own = {name for name in vars(module) if importlib.util.find_spec(f"{package}.{name}") is not None}
    assert own <= {"paper", "views"}  # the report's own modules; the old report imported them by name
    names = [name for name in vars(module) if not name.startswith("__") and name not in own]
    assert names and all(getattr(stage, name) is getattr(module, name) for name in names)
    with pytest.raises(AttributeError):
        _ = stage.no_such_name


def test_the_old_imports_of_the_docs_and_tests_still_work():
    from inn.experiment.report import render, walk_lengths_plot
    from inn.experiment.train import PERPLEXITY_CLAMP, TrainConfig, _perplexity_rose, _settings_from, train
    from inn.tagger import Tagger
    from inn.tagging import Tagger as Exported

    assert render.__module__ == "inn.experiment.report.html"
    assert walk_lengths_plot.__module__ == "inn.experiment.report.figures"  # the figures: a module of their own
    assert train.__module__ == "inn.experiment.train.loop" and TrainConfig and PERPLEXITY_CLAMP
    assert _perplexity_rose and _settings_from and Tagger is Exported


def test_an_old_path_imports_first_in_a_fresh_interpreter():
    code = "import inn.experiment.collect as c, inn.experiment.report.collect as n; assert c is n"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
