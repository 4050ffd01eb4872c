"""The old import paths of the modules that moved into :mod:`inn.tagging` and the experiment's
stage packages, kept for a release: ``import inn.tagger`` gives :mod:`inn.tagging.tagger`
itself, the same module object (so that an attribute set through the old path is set on the
module that runs). No file stands at an old path: an import hook that :mod:`inn` installs
answers for the names of :data:`MOVED`.

The experiment's old modules ``inn.experiment.train``, ``inn.experiment.timing`` and
``inn.experiment.report`` are stage packages now; their old names are found on the package
(``inn.experiment.train.TrainConfig``), as each package's ``__init__`` says.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

#: old module path -> the module it moved to
MOVED: dict[str, str] = {
    "inn.tagger": "inn.tagging.tagger",
    "inn.perceptron": "inn.tagging.perceptron",
    "inn.scoring": "inn.tagging.scoring",
    "inn.conll18": "inn.tagging.conll18",
    "inn.data.documents": "inn.tagging.documents",
    "inn.data.tokenize": "inn.tagging.tokenize",
    "inn.experiment.tag": "inn.tagging.commands",
    **{
        f"inn.segmenter{name}": f"inn.tagging.segmenter{name}" for name in ("", ".io", ".model", ".multiword", ".train")
    },
    "inn.experiment.segment": "inn.experiment.train.segmenter",
    "inn.experiment.prepare": "inn.experiment.data.prepare",
    "inn.experiment.walk_floor": "inn.experiment.data.walk_floor",
    "inn.experiment.train_perceptron": "inn.experiment.train.perceptron",
    "inn.experiment.evaluate": "inn.experiment.train.evaluate",
    "inn.experiment.benchmark": "inn.experiment.timing.benchmark",
    "inn.experiment.benchmark_layers": "inn.experiment.timing.benchmark_layers",
    "inn.experiment.breakdown": "inn.experiment.timing.breakdown",
    "inn.experiment.peers": "inn.experiment.timing.peers",
    "inn.experiment.collect": "inn.experiment.report.collect",
    "inn.experiment.stats": "inn.experiment.report.stats",
    "inn.experiment.views": "inn.experiment.report.views",
    "inn.experiment.report_tables": "inn.experiment.report.tables",
    "inn.experiment.cost": "inn.experiment.report.cost",
    "inn.experiment.paper": "inn.experiment.report.paper",
}


class _OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path of :data:`MOVED` and loads it as the module it moved to."""

    def find_spec(self, fullname: str, path=None, target=None) -> importlib.machinery.ModuleSpec | None:
        return importlib.machinery.ModuleSpec(fullname, self) if fullname in MOVED else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # a placeholder, replaced by the moved module in exec_module

    def exec_module(self, module: ModuleType) -> None:
        # the import system returns what sys.modules holds under the name once this returns
        sys.modules[module.__name__] = importlib.import_module(MOVED[module.__name__])


def install() -> None:
    """Answer imports of the old paths (once per interpreter)."""
    if not any(isinstance(finder, _OldPaths) for finder in sys.meta_path):
        sys.meta_path.insert(0, _OldPaths())  # before the path finder, which would load a moved package's modules again


def old_module_names(package: str, moved: str) -> Callable[[str], Any]:
    """A ``__getattr__`` for ``package``, the stage package that took an old module's path:
    a name that is not one of the package's own modules is looked up in ``moved``, the module
    the old one's code moved to, on first use."""

    def __getattr__(name: str) -> Any:
        if name.startswith("__") or importlib.util.find_spec(f"{package}.{name}") is not None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(moved), name)

    return __getattr__
