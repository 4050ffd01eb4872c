"""Modules of one's own: the Python modules that register cells and models (:mod:`inn.models`)
outside the package, imported before anything reads a model name.

A module is named as Python imports it (``my_cells``, ``lab.cells``: found from the working
directory first, then ``sys.path``) or by its file (``path/to/my_cells.py``, relative to the
working directory). Three places name them, all read by this module:

- the workflow config's ``imports`` list: :func:`inn.experiment.config.validate_config` imports
  it before it checks the config's model names, and the workflow passes it to every job in the
  environment variable :data:`ENV`;
- :data:`ENV` (``INN_IMPORTS``), which every ``inn`` command imports before it runs
  (:func:`inn.experiment.cli.main`): a JSON list of names, as the workflow writes it (a path
  may hold any character, ``:`` included), or names separated by ``os.pathsep`` (``:`` on
  Linux), as one types them;
- ``--import MODULE``, an option of every ``inn`` command (``inn tag --import my_cells
  tagger.pt ...``): a checkpoint or tagger file never imports code by itself.

A module imported twice (from the config and from the environment) runs once.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

from inn.errors import InnError

log = logging.getLogger(__name__)

#: the environment variable that names the modules every ``inn`` command imports first
ENV = "INN_IMPORTS"


def _first_line(exc: BaseException) -> str:
    text = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def is_path(name: str) -> bool:
    """Does ``name`` name a file (``cells.py``, ``lab/cells.py``) rather than an importable module?"""
    return name.endswith(".py") or "/" in name or os.sep in name


def import_module(name: str, where: str = "imports", root: str | os.PathLike = ".") -> ModuleType:
    """Import one module of one's own (see the module docstring for how it is named).

    Args:
        where: what named it, e.g. ``"config: imports.0"`` or ``"--import"``, put before an error.
        root: the folder that relative file paths and top-level module names are found from.

    Raises:
        InnError: one line naming the module: not found, or its import failed (with its error).
    """
    root = Path(root).resolve()
    if is_path(name):
        path = Path(name) if Path(name).is_absolute() else root / name
        path = path.resolve()
        if not path.is_file():
            raise InnError(f"{where}: module file {name} does not exist ({path}); name an existing .py file "
                           "or an importable module")
        for module in list(sys.modules.values()):
            if getattr(module, "__file__", None) and Path(module.__file__).resolve() == path:
                return module
        module_name = path.stem
        if not module_name.isidentifier():
            raise InnError(f"{where}: module file {name}: {path.name} is not a Python module name; "
                           "rename it (letters, digits and _)")
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:  # the user's code: any error is theirs, reported in one line
            del sys.modules[module_name]
            raise InnError(f"{where}: module {name} failed to import: {_first_line(exc)}") from None
        log.info("imported %s (%s)", module_name, path)
        return module
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
            raise InnError(f"{where}: no module named {name!r} (searched {root} and sys.path); name a module "
                           "that Python can import, or its file (path/to/module.py)") from None
        raise InnError(f"{where}: module {name} failed to import: {_first_line(exc)}") from None
    except Exception as exc:
        raise InnError(f"{where}: module {name} failed to import: {_first_line(exc)}") from None
    log.debug("imported %s", name)
    return module


def import_modules(names: Iterable[str], where: str = "imports", root: str | os.PathLike = ".") -> list[ModuleType]:
    """Import each of ``names`` in order (:func:`import_module`); ``where`` gets ``.i`` appended
    per entry for a list (``config: imports.1``)."""
    return [import_module(name, f"{where}.{i}", root) for i, name in enumerate(names)]


def from_environment(environ: os._Environ | dict | None = None) -> list[ModuleType]:
    """Import the modules :data:`ENV` names (none when it is unset or empty).

    Raises:
        InnError: a value that starts as a JSON list but is not a list of names.
    """
    value = (os.environ if environ is None else environ).get(ENV, "")
    if value.lstrip().startswith("["):
        try:
            names = json.loads(value)
        except json.JSONDecodeError as exc:
            raise InnError(f"{ENV} is not a valid JSON list of module names ({exc.msg}): write "
                           '["my_cells", "path/to/cells.py"], or names separated by ' f"{os.pathsep!r}") from None
        if not all(isinstance(name, str) for name in names):
            raise InnError(f"{ENV}: every entry of its JSON list must be a module name or a file path (a string)")
    else:
        names = value.split(os.pathsep)
    names = [name for name in names if name.strip()]
    return [import_module(name.strip(), ENV) for name in names]


def environment_value(names: Iterable[str], root: str | os.PathLike = ".") -> str:
    """The :data:`ENV` value that names ``names`` for a job run anywhere, as a JSON list (a path
    may hold ``os.pathsep``): file paths made absolute (from ``root``), module names as they are."""
    root = Path(root).resolve()
    return json.dumps([str((root / name).resolve()) if is_path(name) else name for name in names])


def split_import_options(argv: list[str]) -> tuple[list[str], list[str]]:
    """``(modules, the other arguments)``: every ``--import MODULE`` (or ``--import=MODULE``) taken
    out of a command line, so that each ``inn`` command accepts it without its own option.

    Raises:
        InnError: a trailing ``--import`` with no module after it.
    """
    modules, rest = [], []
    args = iter(argv)
    for arg in args:
        if arg == "--":
            rest += [arg, *args]
            break
        if arg == "--import":
            module = next(args, None)
            if module is None or module.startswith("-"):
                raise InnError("--import needs a module after it: --import my_cells, or --import path/to/my_cells.py")
            modules.append(module)
        elif arg.startswith("--import="):
            modules.append(arg.split("=", 1)[1])
        else:
            rest.append(arg)
    return modules, rest
