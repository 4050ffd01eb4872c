"""Solvers for the implicit layer's equations H = F(H), forward and adjoint: re-exports.

- :mod:`inn.solvers.forward`: :func:`solve`, the one entry point: it checks the options, picks
  the solver by name, runs it on the starting candidates (with the float64 and homotopy
  fallbacks) and reports each sequence's outcome in a :class:`SolverStats` record.
- :mod:`inn.solvers.table`: the forward solvers, :data:`SOLVERS`, one :class:`SolverSpec`
  each (one solver per file), each option a :class:`SolverOption` with its type, range and
  default; :func:`register_solver` adds one, :func:`check_solver_options` is the one check of
  a solver's name and options wherever they enter (the layer, ``solve``, the workflow's
  config, ``inn train --settings``).
- :mod:`inn.solvers.adjoint`: the adjoints of the implicit backward pass
  (:mod:`inn.nn.implicit_function`), exact (:data:`ADJOINT_SOLVERS`) and approximate
  (:data:`APPROXIMATE_ADJOINTS`), one :class:`AdjointSpec` each with its own options; the
  layer takes them as :data:`BACKWARD_OPTIONS` (``backward_*``).

Every solve returns per-sequence iterations, residuals and :class:`ResultCode` values
(a :class:`SolveResult`). Forward solvers: ``newton_krylov`` (the paper's Newton-BiCGSTAB),
``newton_direct`` (Newton with exact block-tridiagonal solves), ``anderson``
(Anderson-accelerated fixed-point iteration), ``fixed_point`` (plain damped iteration).
"""

# fmt: off
from inn.solvers._common import ConvergenceWarning, FixedPointSystem, ResultCode, SolveResult, SolverStats
from inn.solvers._registry import AdjointSpec, SolverOption, SolverSpec
from inn.solvers.adjoint import (ADJOINT_SOLVERS, APPROXIMATE_ADJOINTS, APPROXIMATE_OPTIONS, BACKWARD_OPTIONS,
                                 adjoint_spec, copy_inverse)
from inn.solvers.bicgstab import KrylovInfo, bicgstab
from inn.solvers.forward import solve
from inn.solvers.table import (COMMON_OPTIONS, FALLBACK_OPTIONS, PAPER_OPTIONS, SOLVERS, check_options,
                               check_solver_options, options_table, register_solver, resumable_options,
                               solver_options, solver_spec)

__all__ = [
    "ADJOINT_SOLVERS", "APPROXIMATE_ADJOINTS", "APPROXIMATE_OPTIONS", "BACKWARD_OPTIONS", "COMMON_OPTIONS",
    "FALLBACK_OPTIONS", "PAPER_OPTIONS", "SOLVERS", "AdjointSpec", "ConvergenceWarning", "FixedPointSystem",
    "KrylovInfo", "ResultCode", "SolveResult", "SolverOption", "SolverSpec", "SolverStats", "adjoint_spec",
    "bicgstab", "check_options", "check_solver_options", "copy_inverse", "options_table", "register_solver",
    "resumable_options", "solve", "solver_options", "solver_spec",
]
# fmt: on
