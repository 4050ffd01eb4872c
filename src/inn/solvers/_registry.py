"""The records of the solver registries: one :class:`SolverSpec` per forward solver, one
:class:`AdjointSpec` per adjoint, one :class:`SolverOption` per option (type, range or
choices, default, a line of doc).

The registries themselves live in :mod:`inn.solvers.table` (forward) and
:mod:`inn.solvers.adjoint`; here are the records and how one option judges a value, so that
every place an option enters (the layer, ``solve``, the workflow's config, ``inn train
--settings``) refuses the same values with the same line.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: the JSON Schema type names a :class:`SolverOption` may take, and how they read in a message
TYPES = {"integer": "an integer", "number": "a number", "boolean": "true or false", "array": "a list"}


def did_you_mean(word: object, known: Sequence[str]) -> str:
    """`` (did you mean 'x'?)`` for the known name closest to ``word``, or nothing."""
    if not isinstance(word, str):
        return ""
    close = difflib.get_close_matches(word, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _number(value: float) -> str:
    """A bound as the line prints it: 1 rather than 1.0."""
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class SolverOption:
    """One option of a solver (or of every solver, or of the implicit backward).

    ``type`` is a JSON Schema type name (``"integer"``, ``"number"``, ``"boolean"``, or
    ``"array"``: a non-empty list whose items are among ``choices``), or None for an option
    that takes only its ``choices``. Beside its type an option takes its ``choices`` (strings:
    ``"auto"``, ``"adaptive"``) and, if ``nullable``, None. ``minimum`` / ``maximum`` bound a
    number inclusively, ``exclusive_minimum`` / ``exclusive_maximum`` strictly. ``resumable``:
    a change of it between an interrupted training and its resumption is allowed (it changes
    how the solve runs, not what it computes: ``cuda_graph``).
    """

    name: str
    default: Any
    doc: str
    type: str | None = None
    choices: tuple[Any, ...] = ()
    minimum: float | None = None
    exclusive_minimum: float | None = None
    maximum: float | None = None
    exclusive_maximum: float | None = None
    nullable: bool = False
    resumable: bool = False

    def __post_init__(self) -> None:
        if self.type is not None and self.type not in TYPES:
            raise ValueError(f"option {self.name}: type must be one of {', '.join(TYPES)} or None, not {self.type!r}")

    def _range(self) -> str:
        """The bounds in words: ``>= 1``, ``in (0, 1]``, or nothing."""
        low = self.minimum if self.minimum is not None else self.exclusive_minimum
        high = self.maximum if self.maximum is not None else self.exclusive_maximum
        if low is not None and high is not None:
            left = "[" if self.minimum is not None else "("
            right = "]" if self.maximum is not None else ")"
            return f" in {left}{_number(low)}, {_number(high)}{right}"
        if low is not None:
            return f" {'>=' if self.minimum is not None else '>'} {_number(low)}"
        if high is not None:
            return f" {'<=' if self.maximum is not None else '<'} {_number(high)}"
        return ""

    def describe(self) -> str:
        """What the option takes, in words: ``an integer >= 1``, ``true, false or 'auto'``,
        ``'adaptive' or a number in (0, 1)``, ``one of 'jacobi', 'red_black'``."""
        words = ", ".join(map(repr, self.choices))
        if self.type == "array":
            what = f"a non-empty list of {words}"
        elif self.type == "boolean":
            what = f"true, false or {words}" if self.choices else "true or false"
        elif self.type is not None:
            what = TYPES[self.type] + self._range()
            if self.choices:
                what = f"{words} or {what}"
        else:
            what = f"one of {words}"
        return f"{what} or null" if self.nullable else what

    def problem(self, value: Any, label: str | None = None) -> str | None:
        """Why ``value`` is not a value of this option, as one line about ``label`` (default:
        the option's name), or None when it is: ``<label> must be <what it takes>, not
        <value>`` for a wrong type or choice, ``<label>: <value> is less than the minimum of
        <bound>`` (JSON Schema's words, as the config's other lines) for a value out of range."""
        label = label or self.name
        if value is None and self.nullable:
            return None
        if self.type == "array":
            if isinstance(value, (list, tuple)) and value and all(v in self.choices for v in value):
                return None
            stray = [v for v in value if v not in self.choices] if isinstance(value, (list, tuple)) else []
            hint = did_you_mean(stray[0], self.choices) if stray else ""
            return f"{label} must be {self.describe()}, not {value!r}{hint}"
        if isinstance(value, str) and value in self.choices:
            return None
        typed = {
            "integer": isinstance(value, int) and not isinstance(value, bool),
            "number": isinstance(value, (int, float)) and not isinstance(value, bool),
            "boolean": isinstance(value, bool),
        }.get(self.type or "", False)
        if not typed:
            hint = did_you_mean(value, [c for c in self.choices if isinstance(c, str)])
            return f"{label} must be {self.describe()}, not {value!r}{hint}"
        if self.type in ("integer", "number"):
            if not math.isfinite(value):
                return f"{label}: {value} is not a finite number"
            if self.minimum is not None and value < self.minimum:
                return f"{label}: {value!r} is less than the minimum of {_number(self.minimum)}"
            if self.exclusive_minimum is not None and value <= self.exclusive_minimum:
                return f"{label}: {value!r} is less than or equal to the minimum of {_number(self.exclusive_minimum)}"
            if self.maximum is not None and value > self.maximum:
                return f"{label}: {value!r} is greater than the maximum of {_number(self.maximum)}"
            if self.exclusive_maximum is not None and value >= self.exclusive_maximum:
                bound = _number(self.exclusive_maximum)
                return f"{label}: {value!r} is greater than or equal to the maximum of {bound}"
        return None


@dataclass(frozen=True)
class SolverSpec:
    """One forward solver of the implicit layer: everything :func:`inn.solvers.solve`, the
    layer, the config check and the docs know of it. Adding a solver is one
    :func:`inn.solvers.register_solver` call.

    ``function(system, H0, groups, counter, *, tol, max_iter, **options) ->``
    :class:`~inn.solvers.SolveResult` solves the stacked candidates (see the
    built-in ones, e.g. :func:`inn.solvers.anderson.anderson`); ``options`` are its own
    keyword options beside ``tol`` and ``max_iter`` (their defaults are the function's);
    ``max_iter`` is its outer-iteration limit by default and ``candidates`` its starting
    points by default (in order; later ones only for sequences that failed).
    """

    name: str
    function: Callable[..., Any]
    options: tuple[SolverOption, ...]
    max_iter: int
    candidates: tuple[str, ...]
    doc: str

    @property
    def defaults(self) -> dict[str, Any]:
        """The solver's own options and their defaults."""
        return {option.name: option.default for option in self.options}


@dataclass(frozen=True)
class AdjointSpec:
    """One adjoint solver of the implicit backward pass: (I - J^T) u = g, J = dF/dH at the
    solution, g the incoming gradient (:mod:`inn.solvers.adjoint`).

    ``function(lin, g, *, tol, max_iter, u0, **options) -> (u, stats)`` for an ``exact``
    adjoint (``u0`` a warm start or None; ``select``, ``rows -> the linearisation of those
    sequences alone``, where it ``compacts``), ``function(lin, g, **options) -> (u, stats)``
    for an approximate one, which has no tolerance to meet. ``options`` are its own keyword
    options, which the layer takes as ``backward_<name>``; ``inherits`` names the forward
    solve's options it takes as they are (the Anderson adjoint's ``cuda_graph``), an own
    option of the same name whose value is None deferring to them.
    """

    name: str
    function: Callable[..., Any]
    doc: str
    options: tuple[SolverOption, ...] = ()
    exact: bool = True
    compacts: bool = False
    inherits: tuple[str, ...] = ()

    @property
    def defaults(self) -> dict[str, Any]:
        """The adjoint's own options and their defaults."""
        return {option.name: option.default for option in self.options}

    def arguments(self, backward: Mapping[str, Any], forward: Mapping[str, Any]) -> dict[str, Any]:
        """The keyword options to call :attr:`function` with, from the layer's ``backward``
        options (``backward_<name>``) and its ``forward`` solve's: each own option as given,
        else the inherited forward option of its name, else its default (a None default: the
        function's own)."""
        values = {name: forward[name] for name in self.inherits if name in forward}
        for option in self.options:
            key = f"backward_{option.name}"
            if key in backward:
                values[option.name] = backward[key]
            elif option.name not in values and option.default is not None:
                values[option.name] = option.default
        return values
