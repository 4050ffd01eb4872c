"""The table of forward solvers: one :class:`~inn.solvers.SolverSpec` per solver, each option
a :class:`~inn.solvers.SolverOption` with its type, range and default.

:data:`SOLVERS` is what :func:`inn.solvers.solve` dispatches on; :func:`check_solver_options`
is the one check of a solver's name and options wherever they enter (the layer, ``solve``, the
workflow's config, ``inn train --settings``); :func:`options_table` writes the options table of
docs/implicit-layer.md from the records. :func:`register_solver` adds a solver.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from inn.errors import InnError
from inn.solvers import anderson as _anderson
from inn.solvers import cuda_graph as _graphs
from inn.solvers import newton_direct as _newton_direct
from inn.solvers import newton_krylov as _newton_krylov
from inn.solvers._registry import SolverOption, SolverSpec, did_you_mean
from inn.solvers.adjoint import BACKWARD_OPTIONS

#: options :func:`solve` itself takes, for every solver (defaults: ``solve``'s own)
COMMON_OPTIONS = (
    SolverOption(
        "tol",
        1e-4,
        "relative residual ||H - F(H)|| / ||H|| every sequence must reach",
        type="number",
        exclusive_minimum=0,
    ),
    SolverOption(
        "max_iter", None, "outer-iteration limit (null: the solver's own)", type="integer", minimum=1, nullable=True
    ),
    SolverOption(
        "candidates",
        None,
        "starting points in order (null: the solver's own)",
        type="array",
        choices=("zeros", "F0", "one_step", "random"),
        nullable=True,
    ),
    SolverOption(
        "candidate_mode",
        "fallback",
        "fallback: a later candidate only where the earlier failed; parallel: all at once (the paper's)",
        choices=("fallback", "parallel"),
    ),
    SolverOption("seed", 0, "seeds the random candidate", type="integer"),
    SolverOption("strict", False, "a solve that misses tol raises instead of warning", type="boolean"),
)

_DIVERGENCE = SolverOption(
    "divergence_factor",
    1e4,
    "a residual this many times its first one counts as diverged",
    type="number",
    exclusive_minimum=1,
)
_LINE_SEARCH = SolverOption(
    "line_search", True, "per-sequence backtracking on ||G|| (the paper: full steps)", type="boolean"
)
_BACKTRACKS = SolverOption("max_backtracks", 6, "halvings of a Newton step per line search", type="integer", minimum=0)
_BETA = SolverOption("beta", 1.0, "damping of each step (1: none)", type="number", exclusive_minimum=0, maximum=1)
_SWEEPS = ("tridiagonal", "red_black", "jacobi")  # inn.solvers.anderson.SWEEPS
#: options :func:`solve` applies itself, not the solver function (see its ``fallback``), for
#: the solvers that list them
_FALLBACK = SolverOption(
    "fallback",
    "homotopy",
    "solve the sequences a float32 solve leaves above tol again on the "
    "float64 system, from where float32 stopped, then from the first candidate; homotopy: then "
    "track a probability-one homotopy for those that are still above it (null: never)",
    choices=("float64", "homotopy"),
    nullable=True,
)
_FALLBACK_AFTER = SolverOption(
    "fallback_after", 100, "float32 iterations per candidate before the fallback takes over", type="integer", minimum=1
)
FALLBACK_OPTIONS = (_FALLBACK, _FALLBACK_AFTER)
# the default starting points: Newton wants a point near the solution, F(0) is one evaluation
# away; the iterations' first sweep from zero is as good as the paper's one-step guess (which
# costs two sequential GRU sweeps)
_NEWTON_STARTS = ("F0", "one_step", "random")
_ITERATION_STARTS = ("zeros", "one_step", "random")


def _sweep(default: str) -> SolverOption:
    return SolverOption(
        "sweep",
        default,
        "the map iterated: tridiagonal-preconditioned step, red-black Gauss-Seidel or plain F",
        choices=_SWEEPS,
    )


#: every solver :func:`solve` knows, by name (:func:`register_solver` adds one)
SOLVERS: dict[str, SolverSpec] = {}


def register_solver(spec: SolverSpec) -> SolverSpec:
    """Add a forward solver to the registry, so that ``solve``, the layers, the workflow's
    config (``solver.name``) and ``inn train --settings`` accept its name and check its options.

    Raises:
        InnError: a name already registered, not a lower-case identifier, or an option named
            as one of :data:`COMMON_OPTIONS` or ``backward_*`` (:data:`BACKWARD_OPTIONS`).
    """
    if not re.fullmatch(r"[a-z][a-z0-9_]*", spec.name):
        raise InnError(f"solver name {spec.name!r}: use lower-case letters, digits and _ (it is a config value)")
    if spec.name in SOLVERS:
        raise InnError(f"a solver named {spec.name!r} is registered already; give yours another name")
    common = {o.name for o in COMMON_OPTIONS}
    shared = sorted(o.name for o in spec.options if o.name in common or o.name.startswith("backward_"))
    if shared:
        raise InnError(
            f"solver {spec.name!r}: option(s) {', '.join(shared)} belong to every solver (solve's own, "
            "or backward_*, the implicit backward's); rename them"
        )
    SOLVERS[spec.name] = spec
    return spec


for _spec in (
    SolverSpec(
        "newton_krylov",
        _newton_krylov.newton_krylov,
        (
            SolverOption(
                "krylov_max_iter", 40, "BiCGSTAB iterations per Newton step (the paper: 40)", type="integer", minimum=1
            ),
            SolverOption(
                "forcing",
                "adaptive",
                "BiCGSTAB's relative tolerance: adaptive (Eisenstat-Walker) or fixed",
                type="number",
                choices=("adaptive",),
                exclusive_minimum=0,
                exclusive_maximum=1,
            ),
            _LINE_SEARCH,
            _BACKTRACKS,
            SolverOption(
                "global_dots", False, "one set of BiCGSTAB scalars for the whole batch (the paper's)", type="boolean"
            ),
            _DIVERGENCE,
        ),
        max_iter=40,
        candidates=_NEWTON_STARTS,
        doc="the paper's Newton-BiCGSTAB (inn.solvers.newton_krylov)",
    ),
    SolverSpec(
        "newton_direct",
        _newton_direct.newton_direct,
        (_LINE_SEARCH, _BACKTRACKS, _DIVERGENCE),
        max_iter=20,
        candidates=_NEWTON_STARTS,
        doc="Newton with exact block-tridiagonal solves (inn.solvers.newton_direct)",
    ),
    SolverSpec(
        "anderson",
        _anderson.anderson,
        (
            SolverOption(
                "memory", 5, "iterates Anderson extrapolates from (fixed_point: none)", type="integer", minimum=1
            ),
            _BETA,
            SolverOption(
                "regularization", 1e-8, "Tikhonov term of the least-squares weights", type="number", minimum=0
            ),
            _sweep("tridiagonal"),
            _DIVERGENCE,
            SolverOption(
                "low_precision",
                "auto",
                "first steps with bfloat16 products (auto: float32 on a CPU with native bfloat16)",
                type="boolean",
                choices=("auto",),
            ),
            SolverOption(
                "low_precision_tol",
                3e-3,
                "where the bfloat16 steps hand over to float32",
                type="number",
                exclusive_minimum=0,
            ),
            SolverOption(
                "cuda_graph",
                False,
                "the solve in captured CUDA graphs (auto: on CUDA devices)",
                type="boolean",
                choices=("auto",),
                resumable=True,
            ),
            SolverOption(
                "cuda_graph_steps",
                _graphs.DEFAULT_STEPS,
                "steps per captured chunk",
                type="integer",
                minimum=1,
                resumable=True,
            ),
            SolverOption(
                "compact",
                "auto",
                "sequences that are done leave the batch, forward and adjoint (auto: on a CPU)",
                type="boolean",
                choices=("auto",),
            ),
            *FALLBACK_OPTIONS,
        ),
        max_iter=200,
        candidates=_ITERATION_STARTS,
        doc="Anderson-accelerated fixed-point iteration (inn.solvers.anderson)",
    ),
    SolverSpec(
        "fixed_point",
        _anderson.fixed_point,
        (_BETA, _sweep("jacobi"), _DIVERGENCE),
        max_iter=500,
        candidates=_ITERATION_STARTS,
        doc="plain (damped) iteration H <- F(H), Anderson's degenerate case",
    ),
):
    register_solver(_spec)


def solver_spec(name: str, where: str = "") -> SolverSpec:
    """The registry's record of solver ``name``.

    Raises:
        InnError: an unknown name, as one line ``[<where>: ]unknown solver ...`` listing the
            known ones.
    """
    spec = SOLVERS.get(name) if isinstance(name, str) else None
    if spec is None:
        prefix = f"{where}: " if where else ""
        raise InnError(
            f"{prefix}unknown solver {name!r}{did_you_mean(name, list(SOLVERS))}; choose one of {', '.join(SOLVERS)}"
        )
    return spec


def solver_options(name: str, where: str = "", *, backward: bool = True) -> dict[str, SolverOption]:
    """Every option solver ``name`` takes, by key: its own, :data:`COMMON_OPTIONS` and
    (``backward``) :data:`BACKWARD_OPTIONS`. An unknown name raises as :func:`solver_spec`."""
    spec = solver_spec(name, where)
    return {o.name: o for o in (*COMMON_OPTIONS, *spec.options, *(BACKWARD_OPTIONS if backward else ()))}


def check_solver_options(
    name: str, options: Mapping[str, Any], where: str = "", *, name_where: str | None = None, backward: bool = True
) -> None:
    """Check solver ``name`` and ``options`` against the registry: every key one of the
    solver's options, :data:`COMMON_OPTIONS` or (``backward``) :data:`BACKWARD_OPTIONS`, and
    every value of its option's type and in its range.

    Args:
        where: the dotted path of ``options`` in what they came from, e.g.
            ``"config: solver.options"``: a line then names ``<where>.<key>``.
        name_where: the path of the name, e.g. ``"config: solver.name"`` (default: none).
        backward: also accept the implicit backward's options (the layer's ``**options``);
            False for :func:`solve`'s own.

    Raises:
        InnError: the first unknown name, unknown key (with the closest known one), wrong type
            or value out of range, as one line.
    """
    known = solver_options(name, name_where or "", backward=backward)
    for key, value in options.items():
        option = known.get(key)
        if option is None:
            hint = did_you_mean(key, list(known))
            takes = ", ".join(sorted(known))
            if where:
                raise InnError(f"{where}.{key}: not an option of solver {name!r}{hint}; it takes {takes}")
            raise InnError(f"solver {name!r} has no option {key!r}{hint}; it takes {takes}")
        problem = option.problem(value, f"{where}.{key}" if where else f"solver {name!r} option {key}")
        if problem:
            raise InnError(problem)


def check_options(method: str, options: dict[str, Any]) -> None:
    """Raise :class:`InnError` for an unknown solver, or an option of :func:`solve` it does
    not take or whose value it refuses (:func:`check_solver_options`, the backward's left out)."""
    solver_spec(method)
    if "cuda_graph" in options:  # the CUDA-graph options' own lines first (inn.solvers.cuda_graph)
        _graphs.check(options["cuda_graph"])
    if "cuda_graph_steps" in options:
        _graphs.check_steps(options["cuda_graph_steps"])
    check_solver_options(method, options, backward=False)


def resumable_options() -> set[str]:
    """The option names that may change between an interrupted training and its resumption
    (:attr:`SolverOption.resumable`: how a solve runs, not what it computes)."""
    specs = (*COMMON_OPTIONS, *BACKWARD_OPTIONS, *(o for spec in SOLVERS.values() for o in spec.options))
    return {o.name for o in specs if o.resumable}


def options_table() -> str:
    """The options of every registered solver as a Markdown table (docs/implicit-layer.md's)."""
    rows = ["| solver | option | default | takes | what |", "|---|---|---|---|---|"]
    groups = [
        ("all", COMMON_OPTIONS),
        *((spec.name, spec.options) for spec in SOLVERS.values()),
        ("backward", BACKWARD_OPTIONS),
    ]
    for group, options in groups:
        for o in options:
            cells = (group, f"`{o.name}`", f"`{_yaml(o.default)}`", o.describe(), o.doc)
            rows.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(rows)


def _yaml(value: Any) -> str:
    """A default as a config spells it: true, null, 1e-4, tridiagonal."""
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    if isinstance(value, float):
        return re.sub(r"e([+-])0*(\d)", lambda m: f"e{m[1].replace('+', '')}{m[2]}", f"{value:g}")
    return str(value)


#: the paper's Newton-Krylov, as an options dict for ``ImplicitGRU(..., **PAPER_OPTIONS)``
PAPER_OPTIONS = dict(_newton_krylov.PAPER_OPTIONS)
