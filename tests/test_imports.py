"""The package's modules import each other without circles.

A circle shows at import time only when a particular module of it is imported first, so each
module is imported as the first of the package: in one fresh interpreter (torch and the other
dependencies load once), with every ``inn`` module dropped from ``sys.modules`` before the next.
Imports inside functions run later and never fail that way, so the second test reads every
``import`` statement, wherever it stands, and asks for a graph without cycles.
"""

from __future__ import annotations

import ast
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import inn

SRC = Path(inn.__file__).resolve().parents[1]
#: importing ``inn.__main__`` runs the command line
MODULES = ["inn"] + [m.name for m in pkgutil.walk_packages(inn.__path__, "inn.") if m.name != "inn.__main__"]

PROBE = """
import importlib, sys, traceback
failed = []
for name in sys.argv[1:]:
    for loaded in [m for m in sys.modules if m == "inn" or m.startswith("inn.")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name.split(".")[0] == "inn":
            failed.append(f"{name}: {exc}")
        # else an optional dependency (triton) that this machine lacks
    except Exception:
        failed.append(name + ": " + traceback.format_exc().strip().splitlines()[-1])
print("\\n".join(failed))
sys.exit(1 if failed else 0)
"""


def test_every_module_imports_first():
    assert {"inn.models", "inn.tagging.perceptron", "inn.experiment.train.evaluate", "inn.checkpoints"} <= set(MODULES)
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    result = subprocess.run(
        [sys.executable, "-c", PROBE, *MODULES], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]


def _imports(name: str) -> set[str]:
    """The package's modules that module ``name`` imports anywhere in its source."""
    path = SRC / Path(*name.split("."))
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            found |= {f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names}
    return {module for module in found if module in MODULES and module != name}


def test_no_import_circles_even_inside_functions():
    graph = {name: _imports(name) for name in MODULES}
    assert "inn.tagging.perceptron" not in graph["inn.models"]  # the models know nothing of the perceptron
    state: dict[str, str] = {}

    def visit(name: str, path: list[str]) -> None:
        state[name] = "open"
        for dep in sorted(graph[name]):
            if state.get(dep) == "open":
                cycle = path[path.index(dep) :] + [dep] if dep in path else path + [dep]
                raise AssertionError("import circle: " + " -> ".join(cycle))
            if dep not in state:
                visit(dep, path + [dep])
        state[name] = "done"

    for name in MODULES:
        if name not in state:
            visit(name, [name])


#: the library: everything outside the experiment's drivers
LIBRARY = [
    name
    for name in MODULES
    if name != "inn.experiment" and not name.startswith("inn.experiment.") and name != "inn.__main__"
]


def test_the_library_imports_nothing_from_the_experiment():
    assert {"inn.nn", "inn.solvers", "inn.models", "inn.checkpoints", "inn.data.corpora"} <= set(LIBRARY)
    assert {"inn.experiment.train.loop", "inn.experiment.cli", "inn.experiment.report.stats"} <= set(MODULES) - set(
        LIBRARY
    )
    wrong = {name: sorted(m for m in _imports(name) if m.startswith("inn.experiment")) for name in LIBRARY}
    assert not {name: found for name, found in wrong.items() if found}
