"""The installed package carries the files it reads at run time.

An editable install reads them from the source tree, so only a built wheel shows what a
``pip install inn`` user gets: the config schema that ``inn train`` checks ``--settings``
against and the report's templates must be inside it.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--disable-pip-version-check",
            "-w",
            str(out),
            str(REPO),
        ],
        check=True,
        capture_output=True,
    )
    (built,) = out.glob("inn-*.whl")
    return built


def test_the_wheel_holds_the_schema_and_the_templates(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "inn/experiment/config.schema.yaml" in names
    templates = {
        p.relative_to(REPO / "src").as_posix() for p in (REPO / "src/inn/experiment/report/templates").glob("*.j2")
    }
    assert templates and templates <= names
    # the one schema: the workflow's is a link to the package's
    assert (REPO / "workflow/schemas/config.schema.yaml").resolve() == (REPO / "src/inn/experiment/config.schema.yaml")


def test_an_installed_inn_finds_its_schema(wheel, tmp_path):
    """Installed elsewhere than the source tree, the training defaults load from the package."""
    zipfile.ZipFile(wheel).extractall(tmp_path / "site")
    probe = "import inn, inn.experiment.config as c; print(inn.__file__); print(c.training_defaults('walks')['loss'])"
    result = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(tmp_path / 'site')!r}); " + probe],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    where, loss = result.stdout.split()
    assert Path(where).is_relative_to(tmp_path / "site") and loss == "token"


#: conda-forge's names for the PyPI packages whose names differ there
CONDA_NAMES = {"torch": "pytorch", "matplotlib": "matplotlib-base", "snakemake": "snakemake-minimal"}


def test_the_conda_environment_lists_every_dependency():
    """environment.yml says it runs the library, the workflow and the tests: it must list every
    requirement of pyproject.toml's core, workflow and test sets (under conda-forge's names)."""
    import re

    import tomllib
    import yaml

    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"]
    wanted = {
        re.split(r"[<>=!~\[ ;]", requirement, maxsplit=1)[0].lower()
        for requirement in [*project["dependencies"], *extras["workflow"], *extras["test"]]
    }
    wanted.discard("inn")  # the test set's "inn[workflow]"
    environment = yaml.safe_load((REPO / "environment.yml").read_text(encoding="utf-8"))
    listed = {
        re.split(r"[<>=!~ ]", entry, maxsplit=1)[0].lower()
        for entry in environment["dependencies"]
        if isinstance(entry, str)
    }
    missing = sorted(name for name in wanted if CONDA_NAMES.get(name, name) not in listed)
    assert not missing, f"environment.yml lacks {', '.join(missing)}"
