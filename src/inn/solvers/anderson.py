"""Anderson acceleration of a fixed-point iteration, and plain (damped) iteration.

Anderson(m) extrapolates from the last m iterates: it picks weights alpha (summing to one)
minimising ||sum_i alpha_i (T(x_i) - x_i)||, per sequence, and steps to
beta * sum alpha_i T(x_i) + (1 - beta) * sum alpha_i x_i. One map evaluation per step, no
Jacobian. With m = 0 it is the damped iteration x <- (1 - beta) x + beta T(x).

The map T (``sweep``) has the same fixed points as F and costs one evaluation of the cell
per position:

- ``"tridiagonal"`` (default): H + (I - D)^{-1} (F(H) - H), where D is the gated copy of
  the neighbours, (1 - z)(s h_{t-1} + (1 - s) h_{t+1}), solved exactly unit by unit along
  the sequence (:mod:`inn.solvers.tridiagonal`). On trained weights, whose slow modes are
  that copy diffusing along the sentence, it needs 9-18 iterations at any length where the
  red-black sweep needs 22-111, rising with n (real EWT text, k = 448 and 224); at
  initialisation the two are level.
- ``"red_black"``: a red-black Gauss-Seidel sweep, even positions first, then odd ones from
  the new even ones; on this nearest-neighbour system it contracts about like two Jacobi
  steps.
- ``"jacobi"``: F itself, every position from the old neighbours.

A sequence counts as converged when the true residual ||H - F(H)|| / ||H|| is below
``tol``. The tridiagonal step computes it on the way and reports it; for the red-black sweep,
whose own residual is only a proxy, it is checked with one F evaluation when the proxy says
so. The same iterations solve the adjoint system u = g + J^T u in the backward
pass (:data:`inn.solvers.ADJOINT_SOLVERS`).

Mixed precision (``low_precision``, on by default for float32 on a CPU with native bfloat16
products): the first steps, down to a residual of ``low_precision_tol`` (3e-3), run on the
system with bfloat16 matrix products, which halves the cost of a step there; the float32
steps then finish from that point, and the answer is tested in float32 as always. bfloat16
alone stalls near a residual of 7e-4 (trained k = 448 weights, n = 10..160).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch import Tensor

from inn.errors import InnError
from inn.solvers._common import Counter, ResultCode, batch_norm, bcast, relative_residual
from inn.solvers._newton import group_any

OPTIONS = {"memory": 5, "beta": 1.0, "regularization": 1e-8, "sweep": "tridiagonal", "divergence_factor": 1e4,
           "low_precision": "auto", "low_precision_tol": 3e-3}
FIXED_POINT_OPTIONS = {"beta": 1.0, "sweep": "jacobi", "divergence_factor": 1e4}


def anderson_iterate(
    fmap: Callable[[Tensor], Tensor | tuple[Tensor, Tensor]],
    x: Tensor,
    scale: Callable[[Tensor], Tensor],
    *,
    tol: float,
    max_iter: int,
    groups: int = 1,
    memory: int = 5,
    beta: float = 1.0,
    regularization: float = 1e-8,
    divergence_factor: float = 1e4,
    true_residual: Callable[[Tensor], Tensor] | None = None,
    first: Tensor | tuple[Tensor, Tensor] | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor, int, int]:
    """Iterate x <- fmap(x) with Anderson(memory) until the residual is below ``tol``.

    The residual is ||fmap(x) - x|| / scale(x), or, when ``true_residual`` is given, that
    function's value, evaluated only when the proxy is below the sample's threshold (which
    tightens if the check fails). A map that computes the true residual of its input anyway
    (a preconditioned step) returns ``(T(x), residual of x)``; that residual is then the test,
    at no extra cost. ``first``: fmap(x) when the caller has it already (cheaper). Returns
    (x, iterations, residual, code, fmap evaluations,
    true-residual evaluations), per sample; each sample keeps its lowest-residual iterate and
    stops when done.
    """
    B = x.shape[0]
    dev, dt = x.device, x.dtype
    tiny = torch.finfo(dt).tiny
    inf = float("inf")
    reg = max(regularization, 100 * torch.finfo(dt).eps)
    Xb = Gb = Fb = None
    stored = 0
    eye = torch.eye(max(memory, 1), dtype=dt, device=dev)
    ones = torch.ones(B, max(memory, 1), 1, dtype=dt, device=dev)
    best_x = x.clone()
    best_res = torch.full((B,), inf, dtype=dt, device=dev)
    threshold = torch.full((B,), float(tol), dtype=dt, device=dev)
    verified = torch.zeros(B, dtype=torch.bool, device=dev)  # true residual <= tol
    true_res = torch.full((B,), inf, dtype=dt, device=dev)
    iterations = torch.zeros(B, dtype=torch.int64, device=dev)
    nonfinite = torch.zeros(B, dtype=torch.bool, device=dev)
    diverged = torch.zeros(B, dtype=torch.bool, device=dev)
    done = torch.zeros(B, dtype=torch.bool, device=dev)
    evals = checks = 0
    too_large = None  # divergence threshold: divergence_factor x the residual after the first step
    # Every step is a handful of whole-batch tensor operations and one host sync (are all
    # samples done?): on a GPU at these sizes the launches, not the arithmetic, set the time.
    for it in range(max_iter + 1):
        fx = first if it == 0 and first is not None else fmap(x)
        evals += 1
        fx, reported = fx if isinstance(fx, tuple) else (fx, None)
        g = fx - x
        gnorm = batch_norm(g)
        # from x = 0 the relative residual is +inf (float32 overflows ||g|| / tiny): not a
        # failure, only not converged; a NaN or Inf in the step itself is one
        finite = gnorm < inf  # False for NaN too
        res = gnorm / scale(x).clamp_min(tiny) if reported is None else reported
        res = torch.where(finite, res, gnorm)
        active = ~done
        improve = active & (res < best_res)
        best_x = torch.where(bcast(improve, x), x, best_x)
        best_res = torch.where(improve, res, best_res)
        nonfinite = nonfinite | (active & ~finite)
        if too_large is not None:  # (from x = 0 the first residual is meaningless: inf)
            diverged = diverged | (active & (res > too_large))
        elif it == 1:
            too_large = (divergence_factor * res).clamp_min(tiny)
        failed = nonfinite | diverged
        if true_residual is None or reported is not None:
            verified = verified | (best_res <= tol)  # a failed sample stopped before it could pass
            true_res = best_res
        else:
            proxy_ok = (best_res <= threshold) & ~failed & ~verified
            if bool(group_any(proxy_ok, groups).any()) and bool((group_any(proxy_ok, groups) | group_any(verified, groups) | failed).all()):
                # check every candidate the proxy calls converged, in one batched evaluation
                r = true_residual(best_x)
                checks += 1
                true_res = torch.where(proxy_ok, r, true_res)
                passed = proxy_ok & (r <= tol)
                verified = verified | passed
                retry = proxy_ok & ~passed
                threshold = torch.where(retry, threshold * torch.clamp(tol / r, 0.05, 0.5), threshold)
                best_res = best_res.masked_fill(retry, inf)
        done = (group_any(verified, groups) if groups > 1 else verified) | failed
        if bool(done.all()) or it == max_iter:
            break
        iterations = iterations + ~done
        if memory <= 0:
            x_next = x + beta * g
        else:
            if Gb is None:  # ring buffers of the last ``memory`` iterates (B, m, N): no re-stacking
                Gb, Fb = x.new_empty(B, memory, x[0].numel()), x.new_empty(B, memory, x[0].numel())
                Xb = x.new_empty(B, memory, x[0].numel()) if beta != 1.0 else None
            slot = stored % memory  # slots are written before they are read
            Gb[:, slot] = g.reshape(B, -1)
            Fb[:, slot] = fx.reshape(B, -1)
            if Xb is not None:
                Xb[:, slot] = x.reshape(B, -1)
            stored += 1
            m = min(stored, memory)
            gram = Gb[:, :m] @ Gb[:, :m].mT  # (B, m, m); the order of the slots does not matter
            diagonal = gram.diagonal(dim1=-2, dim2=-1)
            diagonal.add_(diagonal.mean(-1, keepdim=True).clamp_min(tiny), alpha=reg)
            # minimise alpha^T gram alpha subject to sum(alpha) = 1: alpha ~ gram^{-1} 1
            sol, info = torch.linalg.solve_ex(gram, ones[:, :m])
            alpha = sol / sol.sum(1, keepdim=True)
            usable = (info == 0) & (alpha.sum((1, 2)).abs() < inf)  # False for NaN too
            alpha = torch.where(bcast(usable, alpha), alpha, eye[:m, slot, None])  # else: the plain step
            x_next = (alpha.mT @ Fb[:, :m]).reshape(x.shape)
            if Xb is not None:
                x_next = beta * x_next + (1 - beta) * (alpha.mT @ Xb[:, :m]).reshape(x.shape)
        # finished or failed samples stop moving (their rows cost a little, but stay put)
        x = torch.where(bcast(done, x), best_x, x_next)
    if true_residual is not None and reported is None:
        # samples that ran out of iterations: report their true residual too
        unchecked = ~verified & ~failed & ~torch.isfinite(true_res)
        if bool(unchecked.any()):
            r = true_residual(best_x)
            checks += 1
            true_res = torch.where(unchecked, r, true_res)
        verified = verified | (~failed & (true_res <= tol))
    converged = verified & ~failed
    code = torch.full((B,), int(ResultCode.MAX_ITERATIONS), dtype=torch.int64, device=dev)
    code = code.masked_fill(diverged, int(ResultCode.DIVERGED)).masked_fill(nonfinite, int(ResultCode.NONFINITE))
    code = code.masked_fill(converged, int(ResultCode.CONVERGED))
    true_res = torch.where(failed, best_res, true_res)
    return best_x, iterations, true_res, code, evals, checks


#: sweep name -> the map T of a system whose fixed points Anderson finds
SWEEPS = {
    "jacobi": lambda system: system.F,
    "red_black": lambda system: system.sweep,
    "tridiagonal": lambda system: lambda H: system.tridiagonal_step(H, with_residual=True),
}


def _map(system, sweep: str):
    if sweep not in SWEEPS:
        raise InnError(f"sweep must be one of {', '.join(SWEEPS)}, not {sweep!r}")
    return SWEEPS[sweep](system)


def anderson(system, H: Tensor, groups: int, counter: Counter, *, tol: float, max_iter: int,
             memory: int = 5, beta: float = 1.0, regularization: float = 1e-8, sweep: str = "tridiagonal",
             divergence_factor: float = 1e4, low_precision: bool | str = "auto", low_precision_tol: float = 3e-3):
    """Anderson acceleration of H <- T(H), T one of :data:`SWEEPS`; see :func:`inn.solvers.solve`.

    Mixed precision (``low_precision``: True, False or ``"auto"``, see
    :func:`low_precision_pays`): first iterate on the system with bfloat16 matrix products
    (:meth:`inn.nn.implicit_gru.GRUSystem.low_precision`) down to ``low_precision_tol``, then
    on the float32 system from there down to ``tol``. The answer and its test are float32's;
    only the iterations that get close are cheaper.
    """
    kwargs = dict(groups=groups, memory=memory, beta=beta, regularization=regularization,
                  divergence_factor=divergence_factor)
    low = low_precision_version(system, H, low_precision, tol, low_precision_tol)
    its_low = 0
    if low is not None:  # at most LOW_PRECISION_MAX_ITER steps: bfloat16 stalls near 1e-3
        H, its_low, _, _, evals, checks = _iterate(low, H, sweep, tol=low_precision_tol,
                                                   max_iter=min(max_iter, LOW_PRECISION_MAX_ITER), **kwargs)
        counter.f += evals + checks
    H, its, res, code, evals, checks = _iterate(system, H, sweep, tol=tol, max_iter=max_iter, **kwargs)
    counter.f += evals + checks
    its = its + its_low
    return H, its, torch.zeros_like(its), res, code


#: the most steps of the low-precision first pass (it reaches 3e-3 in 6-8 on trained weights)
LOW_PRECISION_MAX_ITER = 30


def low_precision_pays(device: torch.device, dtype: torch.dtype, setting: bool | str) -> bool:
    """Resolve a ``low_precision`` option: ``"auto"`` is True for float32 on a CPU whose
    oneDNN runs bfloat16 matrix products natively (there a (800 x 448) @ (448 x 448) product
    took 0.85 ms against 3.5 ms in float32), False elsewhere (GPUs: not measured yet)."""
    if setting == "auto":
        return dtype == torch.float32 and device.type == "cpu" and _native_bfloat16()
    if not isinstance(setting, bool):
        raise InnError(f"low_precision must be true, false or 'auto', not {setting!r}")
    return setting


@functools.cache
def _native_bfloat16() -> bool:
    try:
        return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a build without oneDNN's check
        return False


def low_precision_version(target, like: Tensor, setting: bool | str, tol: float, low_tol: float):
    """``target.low_precision()``, the system or linearisation with bfloat16 products, when a
    first pass to ``low_tol`` is wanted (``setting`` for iterates like ``like``), is short of
    ``tol``, and ``target`` has such a version; else None. The forward and the adjoint share it."""
    if tol >= low_tol or not hasattr(target, "low_precision") or not low_precision_pays(like.device, like.dtype, setting):
        return None
    return target.low_precision()


def _iterate(system, H: Tensor, sweep: str, *, tol: float, max_iter: int, **kwargs):
    fmap = _map(system, sweep)
    true_residual = None if sweep == "jacobi" else (lambda x: relative_residual(x - system.F(x), x))
    # the tridiagonal step from H = 0 needs no matrix products (GRUSystem.step_from_zero)
    from_zero = sweep == "tridiagonal" and hasattr(system, "step_from_zero") and not bool(H.any())
    return anderson_iterate(fmap, H, batch_norm, tol=tol, max_iter=max_iter, true_residual=true_residual,
                            first=system.step_from_zero() if from_zero else None, **kwargs)


def fixed_point(system, H: Tensor, groups: int, counter: Counter, *, tol: float, max_iter: int,
                beta: float = 1.0, sweep: str = "jacobi", divergence_factor: float = 1e4):
    """Plain (damped) iteration H <- (1 - beta) H + beta T(H): Anderson with no memory."""
    return anderson(system, H, groups, counter, tol=tol, max_iter=max_iter, memory=0, beta=beta,
                    sweep=sweep, divergence_factor=divergence_factor, low_precision=False)
