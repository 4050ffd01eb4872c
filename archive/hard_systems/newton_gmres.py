"""Newton's method with GMRES right-preconditioned by the tridiagonal I - D as the forward, on
a trained walks fixture: a lead measured, not landed (docs/decisions.md has the verdict).

The GMRES adjoint halves the adjoint's iterations late in training; this asks whether the same
Krylov solve inside Newton (each step linearised at the iterate, Eisenstat-Walker forcing, a
per-sequence line search: :func:`inn.solvers._newton.newton_loop`) beats Anderson's 50-55
forward iterations from zero. The solver is registered here for the measurement only.

    [FIXTURE=tests/fixtures/<fixture>.pt] python newton_gmres.py N BATCHES

For ``anderson`` (the layer's defaults), this Newton-GMRES and ``newton_krylov`` (the paper's
Newton-BiCGSTAB with line search and adaptive forcing), the same BATCHES fresh b = 0.5 training
batches of 20 walks of N steps (seed 1) through the whole model with its token loss
(``inn.experiment.breakdown.batch_costs``), one CPU thread, process time: forward iterations
(Newton steps for the Newton methods), F evaluations of the forward, Jacobian products of the
forward and the adjoint together, and
the seconds of the forward solve, the adjoint and the batch.
"""

import os
import sys

import torch

from inn.experiment.breakdown import batch_costs, fixture_batches
from inn.solvers import SolverSpec, register_solver
from inn.solvers._newton import newton_loop
from inn.solvers.gmres import gmres
from inn.solvers.tridiagonal import Tridiagonal


def newton_gmres(system, H, groups, counter, *, tol, max_iter, line_search=True, max_backtracks=6,
                 forcing="adaptive", divergence_factor=1e4):
    """Newton with (I - J) dH = -G solved by GMRES(30), at most 60 products a step, right-
    preconditioned by the linearisation's tridiagonal I - D."""
    def linear_step(lin, b, eta):
        dH, info = gmres(lambda V: V - lin.jvp(V), Tridiagonal(*lin.copy).solve, b, rtol=eta, maxiter=60,
                         restart=30)
        counter.jp += info.matvecs
        return dH, info.iterations

    return newton_loop(system, H, groups, counter, linear_step, tol=tol, max_iter=max_iter, line_search=line_search,
                       max_backtracks=max_backtracks, forcing=forcing, divergence_factor=divergence_factor)


register_solver(SolverSpec("newton_gmres", newton_gmres, (), max_iter=40, candidates=("F0", "one_step", "random"),
                           doc="Newton with tridiagonal-preconditioned GMRES (a measurement)"))
torch.set_num_threads(1)
fixture = os.environ.get("FIXTURE", "tests/fixtures/walks_b05_inn_seed3_epoch23.pt")
n, count = int(sys.argv[1]), int(sys.argv[2])
model, meta, batches = fixture_batches(fixture, n, count)
tol = model.rnn.options["tol"]
batch_costs(model, batches[0], "token")  # warm-up
for solver, options in (("anderson", dict(model.rnn.options)), ("newton_gmres", {"tol": tol}),
                        ("newton_krylov", {"tol": tol})):
    model.rnn.solver, model.rnn.options = solver, options
    rows = [batch_costs(model, batch, "token") for batch in batches]

    def mean(key: str) -> float:
        return sum(row[key] for row in rows) / len(rows)

    sys.stdout.write(f"n={n} {solver:13s} forward its {mean('forward_mean'):5.1f} (max {max(r['forward_max'] for r in rows)}) "
                     f"at limit {sum(r['forward_limit'] for r in rows)} F {mean('function_evals'):6.1f} "
                     f"J fwd+adj {mean('jacobian_products'):7.1f} forward s {mean('solve_s'):.3f} "
                     f"adjoint s {mean('adjoint_s'):.3f} total s {mean('total_s'):.3f}\n")
