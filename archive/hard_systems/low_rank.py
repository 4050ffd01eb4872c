"""A preconditioner with the learnt coupling, on a trained walks INN: a lead measured, not
landed (docs/decisions.md has the figures and the verdict).

The tridiagonal step inverts I - D (the gated copy) and leaves the weight matrices' coupling to
Anderson. M_r = I - J_r keeps the gates exact and cuts each recurrent matrix to its r leading
singular directions (RANKS: the ranks of U_p, U_n, U_z, U_r, U, e.g. 0,0,3,3,3; 0,0,0,0,0 is
the tridiagonal step, full rank is Newton). For the GRU, with U_p = U_n = 0,
J_r = D + C G S: S the change of hhat (elementwise), G_t (m x k) what the cut matrices read of
it, C_t (k x m) what they write back. By Woodbury, T = I - D,

    (I - J_r)^{-1} b = y + T^{-1} C K^{-1} G S y,   y = T^{-1} b,   K = I - G S T^{-1} C,

K dense, n m per sequence, built from T^{-1} through its semiseparable structure.

    python low_rank.py FIXTURE rho N RANKS [RANKS ...] rho of I - M_r^{-1} (I - J) at the float64
                                                       fixed point, 20 fresh b = 0.5 walks of N steps
    python low_rank.py FIXTURE forward N RANK          float64 Anderson iterations to 1e-4: the
                                                       tridiagonal step to a switch, then M_r there
    python low_rank.py FIXTURE retry N BATCHES RANK    the walks whose float32 forward (40
                                                       iterations a candidate) misses tol, solved
                                                       again on their float64 copy: as the layer
                                                       does (the tridiagonal step from zero), the
                                                       same from the float32 end point, and M_r's
                                                       step from there (its build included); CPU
                                                       time of one thread
    python low_rank.py FIXTURE adjoint N BATCHES RANK  float32 adjoint solves of the token loss's
                                                       gradient: the layer's (with and without
                                                       compaction) and M_r^T's (its build included),
                                                       40 float32 iterations then the float64
                                                       fallback, as in training; CPU time of one thread
                                                       (DEVICE=cuda in the environment: on the GPU,
                                                       wall time after a synchronisation)
"""

import copy
import os
import sys
import time
import warnings

import torch
from torch import Tensor

import inn.solvers as solvers
from inn.batches import collate
from inn.checkpoints import load_checkpoint
from inn.data.walk import generate_walks
from inn.experiment.timing import synchronize
from inn.nn.implicit_function import float64_fallback
from inn.solvers.anderson import anderson_iterate
from inn.solvers.block_tridiagonal import BlockTridiagonalLU, _cpu_single_thread
from inn.solvers.tridiagonal import Tridiagonal

torch.set_num_threads(1)
warnings.simplefilter("ignore")
DEVICE = torch.device(os.environ.get("DEVICE", "cpu"))


def clock() -> float:
    """CPU time of this thread on the CPU; on a GPU, wall time once its queue is done."""
    if DEVICE.type == "cpu":
        return time.process_time()
    synchronize(DEVICE)
    return time.perf_counter()


def truncated_factors(weight: Tensor, rank: int) -> tuple[Tensor, Tensor]:
    """(A, B) with A B^T the best rank-``rank`` approximation of ``weight`` (k_out x k_in):
    A = U S (k_out x r), B = V (k_in x r)."""
    U, S, Vh = torch.linalg.svd(weight, full_matrices=False)
    return U[:, :rank] * S[:rank], Vh[:rank].mT


def _apply(lower: Tensor, upper: Tensor, v: Tensor) -> Tensor:
    """(lower_t v_{t-1} + upper_t v_{t+1}) for every t; v (B, n, k, ...) with coefficients
    (B, n, k) broadcast over the trailing dims."""
    extra = (1,) * (v.dim() - 3)
    lo, up = lower.reshape(*lower.shape, *extra), upper.reshape(*upper.shape, *extra)
    out = torch.zeros_like(v)
    out[:, 1:] += lo[:, 1:] * v[:, :-1]
    out[:, :-1] += up[:, :-1] * v[:, 1:]
    return out


def _thomas(lower: Tensor, upper: Tensor, b: Tensor) -> Tensor:
    """(I - tridiag(lower, upper))^{-1} b along dim 1 for b (B, n, k, c), c right-hand sides
    per unit side by side (the coefficients (B, n, k) broadcast over them)."""
    lo, up = lower.unsqueeze(-1), upper.unsqueeze(-1)
    n = b.shape[1]
    ratio, w = [up[:, 0]], [b[:, 0]]
    for t in range(1, n):
        inv = (1 - lo[:, t] * ratio[-1]).reciprocal()
        ratio.append(up[:, t] * inv)
        w.append((b[:, t] + lo[:, t] * w[-1]) * inv)
    x = [w[-1]] * n
    for t in range(n - 2, -1, -1):
        x[t] = w[t] + ratio[t] * x[t + 1]
    return torch.stack(x, 1)


def capacitance(G: Tensor, Q: Tensor, C: Tensor, inverse: Tensor, chunk: int = 8) -> Tensor:
    """K = I - G Q C, K[(p, j), (t, l)] = delta - sum_u G[p, j, u] Q[p, u, t] C[t, u, l], with
    Q = S T^{-1} (B, n, k, n) and ``inverse`` T^{-1}, both indexed [b, p, u, t].

    Done directly that is n^2 products of (m x k) by (k x m) per sequence, too thin to run
    fast. T^{-1} of a tridiagonal T is semiseparable: for q <= t' <= t (and q >= t' >= t)
    T^{-1}[q, t] = T^{-1}[q, t'] T^{-1}[t', t] / T^{-1}[t', t'], and S reaches one position
    each way. So the rows of a chunk of positions [s, e) meet every column t < s through the
    pivot t' = s - 1, and every t >= e through t' = e: two (chunk m x k) by (k x n m)
    products per chunk. Every factor is an entry of T^{-1} (bounded: T is an M-matrix with
    unit diagonal, so T^{-1} >= I), and a factor that underflows stands for a coupling that
    is negligible. Only the chunk's own columns are done directly.
    """
    B, n, k, m = C.shape
    K = torch.zeros(B, n, m, n, m, dtype=C.dtype, device=C.device)
    CT = C.transpose(1, 2)  # (B, k, n, m)
    for s in range(0, n, chunk):
        e = min(s + chunk, n)
        rows = G[:, s:e]  # (B, w, m, k)
        w = e - s
        if s > 0:  # columns t < s, through t' = s - 1
            left = rows * (Q[:, s:e, :, s - 1] / inverse[:, s - 1, :, s - 1].unsqueeze(1)).unsqueeze(2)
            right = inverse[:, s - 1, :, :s].unsqueeze(-1) * CT[:, :, :s]  # (B, k, s, m)
            K[:, s:e, :, :s] = (left.reshape(B, w * m, k) @ right.reshape(B, k, s * m)).view(B, w, m, s, m)
        if e < n:  # columns t >= e, through t' = e
            left = rows * (Q[:, s:e, :, e] / inverse[:, e, :, e].unsqueeze(1)).unsqueeze(2)
            right = inverse[:, e, :, e:].unsqueeze(-1) * CT[:, :, e:]
            K[:, s:e, :, e:] = (left.reshape(B, w * m, k) @ right.reshape(B, k, (n - e) * m)).view(B, w, m, n - e, m)
        for t in range(s, e):  # the chunk's own columns
            K[:, s:e, :, t] = (rows * Q[:, s:e, :, t].unsqueeze(2)) @ C[:, t].unsqueeze(1)
    return torch.eye(n * m, dtype=C.dtype, device=C.device) - K.reshape(B, n * m, n * m)


class LowRankCoupling:
    """I - (D + C G S) factorised, for solves with it and with its transpose.

    ``copy``: (lower, upper) of D, (B, n, k) each; ``shift``: (ls, us) of S, (B, n, k) each,
    zero where there is no neighbour; ``C`` (B, n, k, m); ``G`` (B, n, m, k).
    """

    def __init__(self, copy: tuple[Tensor, Tensor], shift: tuple[Tensor, Tensor], C: Tensor, G: Tensor) -> None:
        B, n, k, m = C.shape
        self.shift, self.C, self.G = shift, C, G
        self.T = Tridiagonal(*copy)
        self.TT = Tridiagonal.transposed(*copy)
        eye = torch.eye(n, dtype=C.dtype, device=C.device).view(1, n, 1, n).expand(B, n, k, n)
        inverse = _thomas(*copy, eye)  # T^{-1}, unit by unit: inverse[b, p, u, t]
        K = capacitance(G, _apply(*shift, inverse), C, inverse)
        with _cpu_single_thread(K):
            self.LU, self.pivots = torch.linalg.lu_factor(K)

    def _capacitance_solve(self, r: Tensor, adjoint: bool) -> Tensor:
        B, n, m = r.shape
        with _cpu_single_thread(r):
            w = torch.linalg.lu_solve(self.LU, self.pivots, r.reshape(B, n * m, 1), adjoint=adjoint)
        return w.view(B, n, m)

    def solve(self, b: Tensor) -> Tensor:
        """x with (I - J_r) x = b, b (B, n, k)."""
        y = self.T.solve(b)
        w = self._capacitance_solve((self.G @ _apply(*self.shift, y).unsqueeze(-1)).squeeze(-1), adjoint=False)
        return y + self.T.solve((self.C @ w.unsqueeze(-1)).squeeze(-1))

    def solve_transposed(self, b: Tensor) -> Tensor:
        """u with (I - J_r)^T u = b, b (B, n, k)."""
        y = self.TT.solve(b)
        w = self._capacitance_solve((y.unsqueeze(-2) @ self.C).squeeze(-2), adjoint=True)  # C^T y
        back = (w.unsqueeze(-2) @ self.G).squeeze(-2)  # G^T w
        return y + self.TT.solve(_apply(*Tridiagonal.transposed_coefficients(*self.shift), back))


def gru_coupling(lin, rank: int):
    """((ls, us), C, G) of J_r = D + C G S for the implicit GRU's linearisation ``lin``."""
    sy, k = lin.system, lin.k
    _, Wzr, Wc = sy.weights
    Az, Bz = truncated_factors(Wzr[:k], rank)
    Ar, Br = truncated_factors(Wzr[k:], rank)
    Ac, Bc = truncated_factors(Wc, rank)
    B, n = lin.s.shape[:2]
    reads_c = Bc.mT * lin.r.unsqueeze(-2) + torch.einsum("ur,bnu,us->bnrs", Bc, lin.hrd, Ar) @ Br.mT
    G = torch.cat([Bz.mT.expand(B, n, rank, k), reads_c], dim=2)
    C = torch.cat([lin.gz.unsqueeze(-1) * Az, lin.gc.unsqueeze(-1) * Ac], dim=-1) * sy.maskf.unsqueeze(-1)
    return sy.mask_coupling(lin.s, 1 - lin.s), C, G


def cut_weights(weights, spec):
    """The recurrent weights with each k x k matrix cut to its rank in ``spec`` (p, n, z, r, c)."""
    def cut(W, ranks):
        k = W.shape[1]
        return torch.cat([A @ B.mT for i, r in zip(range(0, W.shape[0], k), ranks)
                          for A, B in [truncated_factors(W[i:i + k], r)]])
    return cut(weights[0], spec[0:2]), cut(weights[1], spec[2:4]), cut(weights[2], spec[4:5])


def walks(model, n: int, seed: int):
    return collate([{"x": x, "y": y} for x, y in generate_walks(20, 0.5, model.config.input_dim, seed,
                                                                max_len=n, min_len=n)])


def solved64(model, batch):
    m64 = copy.deepcopy(model).double()
    m64.rnn.options = {**m64.rnn.options, "tol": 1e-10, "max_iter": 500}
    x = batch["x"].double()
    m64.rnn(x, batch["mask"])
    return m64.rnn.system(x, batch["mask"]), m64.rnn.last_solution


def scale(H: Tensor) -> Tensor:
    return H.flatten(1).norm(dim=1).clamp_min(1e-30)


def radius(lin, solve, v0: Tensor, steps: int = 80) -> Tensor:
    """Per sequence: the spectral radius of I - M^{-1} (I - J) by power iteration."""
    v, logs = v0 / scale(v0).view(-1, 1, 1), []
    for _ in range(steps):
        w = v - solve(v - lin.jvp(v))
        logs.append(scale(w).log())
        v = w / scale(w).view(-1, 1, 1)
    return torch.stack(logs[-20:]).mean(0).exp()


def main() -> None:
    fixture, mode, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    model, _ = load_checkpoint(fixture)
    with torch.no_grad():
        if mode == "rho":
            system, H = solved64(model, walks(model, n, 1000))
            lin, full = system.linearize(H), system.weights
            v0 = torch.randn(H.shape, dtype=H.dtype, generator=torch.Generator().manual_seed(0))
            for spec in ([int(r) for r in a.split(",")] for a in sys.argv[4:]):
                system.weights = cut_weights(full, spec)
                LU = BlockTridiagonalLU(lin.blocks, n)  # dense blocks of I - J_r: independent of Woodbury
                system.weights = full
                shown = f"ranks {spec}: rho median {radius(lin, LU.solve, v0).median():.3f}"
                if spec[:2] == [0, 0] and spec[2] == spec[3] == spec[4]:  # the Woodbury form, the same M_r
                    M = LowRankCoupling(lin.copy, *gru_coupling(lin, spec[2]))
                    shown += f" (Woodbury: {radius(lin, M.solve, v0).median():.3f})"
                print(shown, flush=True)
        elif mode == "forward":
            rank = int(sys.argv[4])
            system, _ = solved64(model, walks(model, n, 1000))
            zero = torch.zeros(20, n, model.rnn.hidden_size, dtype=torch.float64)
            tri = lambda H: system.tridiagonal_step(H, with_residual=True)  # noqa: E731
            its = anderson_iterate(tri, zero, scale, tol=1e-4, max_iter=300)[1]
            print(f"n = {n}: tridiagonal step alone {its.float().mean():.1f} iterations (max {its.max()})")
            for switch in (None, 3e-2, 1e-2, 3e-3):  # None: M_r from zero, built at zero
                if switch is None:
                    H, first = zero, torch.zeros(20)
                else:
                    H, first = anderson_iterate(tri, zero, scale, tol=switch, max_iter=300)[:2]
                M = LowRankCoupling(system.linearize(H).copy, *gru_coupling(system.linearize(H), rank))

                def step(H: Tensor):
                    r = system.F(H) - H
                    return H + M.solve(r), scale(r) / scale(H)
                _, then, res = anderson_iterate(step, H, scale, tol=1e-4, max_iter=300)[:3]
                print(f"  to {switch or 'zero':} {first.float().mean():.1f}, then M_r (rank {rank}) there "
                      f"{then.float().mean():.1f} (max {then.max()}), {int((res > 1e-4).sum())} above tol")
        elif mode == "retry":
            batches, rank = int(sys.argv[4]), int(sys.argv[5])
            model.rnn.options = {**model.rnn.options, "fallback": None, "max_iter": 40, "strict": False}  # the float32 part
            found = {"tridiagonal, from zero (the first candidate)": [], "tridiagonal, from the float32 end": [],
                     f"M_r, rank {rank}, from the float32 end": []}
            for i in range(batches):
                batch = walks(model, n, 500 + i)
                model.rnn(batch["x"], batch["mask"])
                rows = (~model.rnn.last_stats.converged).nonzero().flatten()
                if not rows.numel():
                    continue
                sub = model.rnn.system(batch["x"], batch["mask"]).select(rows).in_precision(torch.float64)
                end = model.rnn.last_solution[rows].double().nan_to_num(0.0)
                tri = lambda H: sub.tridiagonal_step(H, with_residual=True)  # noqa: E731

                def low_rank(H0: Tensor):
                    lin = sub.linearize(H0)
                    M = LowRankCoupling(lin.copy, *gru_coupling(lin, rank))

                    def step(H: Tensor):
                        r = sub.F(H) - H
                        return H + M.solve(r), scale(r) / scale(H)
                    return step
                for name, (make, start) in zip(found, ((lambda H0: tri, torch.zeros_like(end)), (lambda H0: tri, end),
                                                       (low_rank, end))):
                    t0 = time.process_time()
                    _, its, res = anderson_iterate(make(start), start, scale, tol=1e-4, max_iter=2000)[:3]
                    found[name].append(torch.stack([its.double(), (res <= 1e-4).double(),
                                                    torch.full_like(res, (time.process_time() - t0) / len(rows))], 1))
            for name, r in found.items():
                t = torch.cat(r) if r else torch.zeros(0, 3)
                print(f"n = {n}, {batches} batches, {len(t)} float32 misses, {name}: iterations median "
                      f"{t[:, 0].median():.0f} (max {t[:, 0].max():.0f}), {int(t[:, 1].sum())} converged, "
                      f"{t[:, 2].mean() * 1e3:.0f} ms a walk")
        elif mode == "adjoint":
            batches, rank = int(sys.argv[4]), int(sys.argv[5])
            model.to(DEVICE)
            original = solvers.copy_inverse

            builds: list[float] = []

            class Transposed:
                def __init__(self, lin):
                    t0 = clock()
                    self.M = LowRankCoupling(lin.copy, *gru_coupling(lin, rank))
                    builds.append(clock() - t0)

                def solve(self, b: Tensor) -> Tensor:
                    return self.M.solve_transposed(b)
            rows: dict[str, list] = {"layer's": [], "layer's, compacted": [], f"M_r^T, rank {rank}": []}
            for i in range(batches):
                batch = walks(model, n, 500 + i)
                x, mask, y = (batch[key].to(DEVICE) for key in ("x", "mask", "y"))
                model.rnn(x, mask)
                system, H = model.rnn.system(x, mask), model.rnn.last_solution
                with torch.enable_grad():
                    Hg = H.clone().requires_grad_(True)
                    logits = model.output(Hg).squeeze(-1)
                    loss = torch.nn.functional.binary_cross_entropy_with_logits(logits[mask], y[mask].float())
                    g, = torch.autograd.grad(loss, Hg)
                lin = system.linearize(H)
                select = lambda r: system.select(r).linearize(H[r])  # noqa: E731
                for name, inverse, extra in zip(rows, (original, original, Transposed), ({}, {"select": select}, {})):
                    solvers.copy_inverse = inverse
                    t0 = clock()
                    # as training solves it: 40 float32 iterations, then the float64 fallback
                    u, st = solvers.ADJOINT_SOLVERS["anderson"](lin, g, tol=1e-4, max_iter=40, **extra)
                    if st.num_failed:
                        u, st = float64_fallback(lin, H, g, u, st, "float64", 1e-4, 200)
                    rows[name].append((clock() - t0, st.newton_iterations.float().mean().item(),
                                       st.num_failed))
                solvers.copy_inverse = original
            for name, r in rows.items():
                t = torch.tensor(r)
                print(f"n = {n}, {batches} batches, {name}: {t[:, 0].mean() * 1e3:.1f} ms a batch, "
                      f"{t[:, 1].mean():.1f} iterations, {int(t[:, 2].sum())} sequences above tol")
            print(f"    building M_r (the coupling, K and its factorisation): {sum(builds) / batches * 1e3:.1f} ms a batch")


if __name__ == "__main__":
    main()
