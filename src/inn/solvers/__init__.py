"""Solvers for the implicit layer's equations H = F(H), forward and adjoint.

One entry point, :func:`solve`, validates the options once, builds the starting candidates
and dispatches by name through the registry :data:`SOLVERS`: one :class:`SolverSpec` per
solver (one solver per file), each option a :class:`SolverOption` with its type, range and
default. :func:`register_solver` adds a solver; :func:`check_solver_options` is the one check
of a solver's name and options, wherever they enter (the layer, ``solve``, the workflow's
config, ``inn train --settings``). Every solver returns per-sequence iteration counts,
residuals and :class:`ResultCode` values, collected in a :class:`SolverStats` record.
:data:`ADJOINT_SOLVERS` solve the transposed linear system of the implicit backward pass
(:mod:`inn.nn.implicit_function`), whose options are :data:`BACKWARD_OPTIONS`.

Solvers:

- ``newton_krylov``: the paper's Newton-BiCGSTAB (:mod:`inn.solvers.newton_krylov`).
- ``newton_direct``: Newton with exact block-tridiagonal solves (:mod:`inn.solvers.newton_direct`).
- ``anderson``: Anderson-accelerated fixed-point iteration (:mod:`inn.solvers.anderson`).
- ``fixed_point``: plain (damped) iteration H <- F(H), Anderson's degenerate case.
"""

from inn.solvers._common import ConvergenceWarning, FixedPointSystem, ResultCode, SolverStats
from inn.solvers._registry import SolverOption, SolverSpec
from inn.solvers.adjoint import (
    ADJOINT_SOLVERS,
    APPROXIMATE_ADJOINTS,
    APPROXIMATE_OPTIONS,
    BACKWARD_OPTIONS,
    _adjoint_anderson,
    copy_inverse,
)
from inn.solvers.bicgstab import KrylovInfo, bicgstab
from inn.solvers.forward import solve
from inn.solvers.table import (
    COMMON_OPTIONS,
    FALLBACK_OPTIONS,
    PAPER_OPTIONS,
    SOLVERS,
    check_options,
    check_solver_options,
    options_table,
    register_solver,
    resumable_options,
    solver_options,
    solver_spec,
)

__all__ = [
    "ADJOINT_SOLVERS", "APPROXIMATE_ADJOINTS", "BACKWARD_OPTIONS", "COMMON_OPTIONS", "ConvergenceWarning",
    "FixedPointSystem", "KrylovInfo", "PAPER_OPTIONS", "ResultCode", "SOLVERS", "SolverOption", "SolverSpec",
    "SolverStats", "bicgstab", "check_options", "check_solver_options", "register_solver", "solve", "solver_options",
    "solver_spec",
]
