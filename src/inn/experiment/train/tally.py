"""The implicit layer's solver statistics over one training epoch, summed batch by batch into the
epoch's history row (:class:`SolverTally`)."""

from __future__ import annotations

import bisect
import copy


class SolverTally:
    """Per-epoch sums of the implicit layer's solver statistics (means per batch, max, count)."""

    def __init__(self) -> None:
        self.batches = 0
        self.newton = 0.0
        self.krylov = 0.0
        self.residual = 0.0
        self.nonconverged = 0
        self.backward_nonconverged = 0
        self.backward = 0.0
        self.backward_gmres = 0  # batches whose adjoint ran GMRES (backward_solver auto past its mark, or gmres)
        self.jacobian: list[float] = []  # the regularised batches' ||dF/dH||_F^2 estimates
        # per-sequence iterations of the forward and adjoint solves, binned (HISTOGRAM_EDGES)
        self.histogram = {
            "newton": [0] * (len(self.HISTOGRAM_EDGES) + 1),
            "backward": [0] * (len(self.HISTOGRAM_EDGES) + 1),
        }
        self.limit = {"newton": 0, "backward": 0}  # sequences stopped at the iteration limit
        self.homotopy = 0  # forward solves no local solver finished, handed to the homotopy

    #: upper edges of the iteration histogram's bins: <= 10, 11-20, 21-40, 41-80, 81-160, > 160
    HISTOGRAM_EDGES = (10, 20, 40, 80, 160)

    def _count(self, kind: str, stats) -> None:
        """Bin one solve's per-sequence iterations and count its sequences at the limit."""
        from inn.solvers import ResultCode

        its = (stats.newton_iterations + stats.krylov_iterations).tolist()
        for value in its:
            self.histogram[kind][bisect.bisect_left(self.HISTOGRAM_EDGES, value)] += 1
        self.limit[kind] += int((stats.code == int(ResultCode.MAX_ITERATIONS)).sum())

    def add(self, layer) -> None:
        stats = getattr(layer, "last_stats", None)
        if stats is None:
            return
        self.batches += 1
        self.newton += float(stats.newton_iterations.float().mean())
        self.krylov += float(stats.krylov_iterations.float().mean())
        self.residual = max(self.residual, float(stats.residual.max()))
        self.nonconverged += stats.num_failed
        self.homotopy += int(stats.extra.get("homotopy", 0))
        self._count("newton", stats)
        back = getattr(layer, "last_backward_stats", None)
        if back is not None:
            self.backward_nonconverged += back.num_failed
            self._count("backward", back)
            self.backward += float((back.newton_iterations + back.krylov_iterations).float().mean())
            self.backward_gmres += getattr(layer, "last_adjoint_solver", None) == "gmres"
            layer.last_backward_stats = None

    def state_dict(self) -> dict:
        """The sums so far, for a run stopped inside an epoch (plain numbers, lists and dicts)."""
        return copy.deepcopy(vars(self))

    def load_state_dict(self, state: dict) -> None:
        vars(self).update(state)

    def row(self) -> dict[str, float]:
        n = max(self.batches, 1)
        return {
            "newton_iters": self.newton / n,
            "krylov_iters": self.krylov / n,
            "residual": self.residual,
            "nonconverged": self.nonconverged,
            "backward_nonconverged": self.backward_nonconverged,
            "backward_iters": self.backward / n,
            "backward_gmres": self.backward_gmres,
            # "a/b/c/d/e/f": sequences with <= 10, 11-20, 21-40, 41-80, 81-160, > 160 iterations
            "newton_hist": "/".join(map(str, self.histogram["newton"])),
            "newton_limit": self.limit["newton"],
            "backward_hist": "/".join(map(str, self.histogram["backward"])),
            "backward_limit": self.limit["backward"],
            "homotopy": self.homotopy,
            **({"jacobian_fro2": sum(self.jacobian) / len(self.jacobian)} if self.jacobian else {}),
        }
