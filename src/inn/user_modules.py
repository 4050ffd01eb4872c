"""Modules of one's own: the Python modules that register cells and models (:mod:`inn.models`)
outside the package, imported before anything reads a model name.

A module is named as Python imports it (``my_cells``, ``lab.cells``: found on ``sys.path``, then
in the working directory) or by its file (``path/to/my_cells.py``, relative to the
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

A module imported twice (from the config and from the environment) runs once. Its folder (the
file's, or ``root`` for a module name) goes on the import path after the standard library and
the installed packages, so that it can import the files beside it (a cell in ``ncgated_cell.py``
imported by the registrations in ``my_models.py``) but cannot replace them: a module whose name
is one of theirs (a ``json.py``, a ``torch.py``, an ``inn.py``) is refused. A checkpoint records
the user modules its model needs (:func:`needed_by`), in the order they were imported, so that
loading it without them gives the ``--import`` options that rebuild it (:func:`missing_error`).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import json
import logging
import os
import sys
import sysconfig
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

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
            raise InnError(
                f"{where}: module file {name} does not exist ({path}); name an existing .py file "
                "or an importable module"
            )
        for module in list(sys.modules.values()):
            if getattr(module, "__file__", None) and Path(module.__file__).resolve() == path:
                return module
        module_name = path.stem
        if not module_name.isidentifier():
            raise InnError(
                f"{where}: module file {name}: {path.name} is not a Python module name; "
                "rename it (letters, digits and _)"
            )
        _refuse_shadowing(where, name, module_name, path.parent)
        _append_to_path(path.parent)
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            _run_users_code(lambda: spec.loader.exec_module(module), where, name, None)
        except InnError:
            del sys.modules[module_name]
            raise
        log.info("imported %s (%s)", module_name, path)
        return module
    top = name.split(".")[0]
    if (root / f"{top}.py").is_file() or (root / top / "__init__.py").is_file():
        _refuse_shadowing(where, name, top, root)
    _append_to_path(root)
    try:
        module = _run_users_code(lambda: importlib.import_module(name), where, name, name)
    except ModuleNotFoundError:
        raise InnError(
            f"{where}: no module named {name!r} (searched {root} and sys.path); name a module "
            "that Python can import, or its file (path/to/module.py)"
        ) from None
    log.debug("imported %s", name)
    return module


def _run_users_code(run: Callable[[], Any], where: str, name: str, importing: str | None) -> Any:
    """``run()``, the import of a user's module ``name``: any error, or a ``sys.exit``, is one line
    naming the module; ``ModuleNotFoundError`` for ``importing`` itself (or a package above it)
    is raised as it is, for the caller, who knows where it looked."""
    try:
        return run()
    except ModuleNotFoundError as exc:
        if importing and exc.name is not None and (importing == exc.name or importing.startswith(exc.name + ".")):
            raise
        raise InnError(f"{where}: module {name} failed to import: {_first_line(exc)}") from None
    except SystemExit as exc:
        raise InnError(
            f"{where}: module {name} called sys.exit({exc.code!r}) while it was imported; a module "
            "that registers cells and models must not end the program"
        ) from None
    except Exception as exc:  # noqa: BLE001 - the user's code: any error is theirs, in one line
        raise InnError(f"{where}: module {name} failed to import: {_first_line(exc)}") from None


def _append_to_path(folder: Path) -> None:
    """Put a user's folder on the import path after the standard library and the installed
    packages, so that its modules can import each other but not replace those."""
    if str(folder) not in sys.path:
        sys.path.append(str(folder))


def _installed_paths() -> list[str]:
    """The folders of the standard library and the installed packages."""
    paths = sysconfig.get_paths()
    return [paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths]


def _refuse_shadowing(where: str, name: str, module_name: str, folder: Path) -> None:
    """Refuse a user's module (``module_name``, found in ``folder``) whose name is that of a module
    of the standard library, of an installed package, or of one imported from elsewhere."""
    if module_name in sys.stdlib_module_names or module_name in sys.builtin_module_names:
        other = f"the standard library's {module_name}"
    else:
        loaded = sys.modules.get(module_name)
        origin = getattr(loaded, "__file__", None) if loaded is not None else None
        if origin is None and loaded is None:
            spec = importlib.machinery.PathFinder.find_spec(module_name, [p for p in sys.path if p != str(folder)])
            origin = spec.origin if spec is not None else None
        if origin is None or Path(origin).resolve().parent in (folder, folder / module_name):
            return
        other = f"the module {module_name} ({origin})"
    raise InnError(
        f"{where}: module {name} has the name of {other} and would replace it wherever it is "
        f"imported; rename your file (e.g. my_{module_name}.py)"
    )


def _is_users(name: str) -> bool:
    """Is the imported module ``name`` a user's: not the package's, the standard library's or an
    installed package's?"""
    file = getattr(sys.modules.get(name), "__file__", None)
    if name == "inn" or name.startswith("inn.") or file is None or name.split(".")[0] in sys.stdlib_module_names:
        return False
    resolved = Path(file).resolve()
    return not any(resolved.is_relative_to(Path(folder).resolve()) for folder in _installed_paths())


def needed_by(model: Any, *names: str | None) -> list[dict[str, str]]:
    """The user modules a model needs, as a checkpoint records them: ``names`` (the modules that
    registered its model and cell) and those that define the classes of its ``nn.Module`` parts
    (the cell's file beside its registration), each ``{"module": name, "file": path}``, in the
    order they were imported in this process (the order that imports them again)."""
    wanted = {name for name in names if name} | {type(part).__module__ for part in model.modules()}
    order = list(sys.modules)
    users = sorted((name for name in wanted if name in sys.modules and _is_users(name)), key=order.index)
    return [{"module": name, "file": str(Path(sys.modules[name].__file__).resolve())} for name in users]


def recorded(payload: dict[str, Any]) -> list[dict[str, str]]:
    """The user modules a checkpoint payload records (:func:`needed_by`); a file written before
    the list recorded only the module that registered its model."""
    if "model_modules" in payload:
        return list(payload["model_modules"])
    module = payload.get("model_module")
    if not module:
        return []
    return [{"module": module, **({"file": payload["model_module_file"]} if payload.get("model_module_file") else {})}]


def missing_error(path: str | os.PathLike, kind: str, modules: list[dict[str, str]]) -> InnError:
    """The line for a checkpoint ``path`` whose model ``kind`` is registered by user ``modules``
    that are not imported: the ``--import`` options that import them, by file where the file
    is still there (any working directory), else by name."""
    options = " ".join(
        f"--import {entry['file'] if Path(entry.get('file') or '').is_file() else entry['module']}" for entry in modules
    )
    names = ", ".join(entry["module"] for entry in modules)
    return InnError(
        f"{path}: its model {kind} needs the module{'s' if len(modules) > 1 else ''} {names}, not "
        f"imported (a model file never imports code by itself): add {options} to the command"
    )


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
            raise InnError(
                f"{ENV} is not a valid JSON list of module names ({exc.msg}): write "
                '["my_cells", "path/to/cells.py"], or names separated by '
                f"{os.pathsep!r}"
            ) from None
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
