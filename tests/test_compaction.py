"""Anderson's compaction: sequences that are done leave the batch, forward and adjoint.

A batch whose sequences need different numbers of iterations (lengths 1 to 12, inputs of
different scales) is solved with and without ``compact``: the same iterates per sequence
(Anderson's weights are each sequence's own), so the same solutions, iteration counts, result
codes and gradients; and the solver did go on with fewer sequences (the systems it selected).
"""

import warnings

import pytest
import torch
from conftest import make_batch, make_layer

from inn.nn.implicit_layer import ImplicitSystem
from inn.solvers import ResultCode
from inn.solvers.anderson import COMPACT_AT, AndersonState


def _uneven_batch(B=8, n=12, dtype=torch.float64):
    torch.manual_seed(3)
    xi, mask = make_batch(B=B, n=n, lengths=[12, 1, 9, 3, 12, 6, 2, 11][:B], dtype=dtype)
    return xi * torch.linspace(0.2, 3.0, B, dtype=dtype)[:, None, None], mask


def _run(compact, monkeypatch, dtype=torch.float64, **options):
    sizes = []
    original = ImplicitSystem.select
    monkeypatch.setattr(ImplicitSystem, "select", lambda self, rows: sizes.append(rows.numel()) or original(self, rows))
    torch.manual_seed(0)
    layer = make_layer(scale=1.6, dtype=dtype, solver="anderson", compact=compact, **options)
    xi, mask = _uneven_batch(dtype=dtype)
    xi.requires_grad_(True)
    target = torch.randn(xi.shape[0], xi.shape[1], 6, dtype=dtype)
    H = layer(xi, mask)
    (H * target).sum().backward()
    grads = torch.cat([xi.grad.flatten()] + [p.grad.flatten() for p in layer.parameters()])
    monkeypatch.undo()
    return layer, H.detach(), grads, sizes


def test_compaction_changes_no_sequence_only_the_work(monkeypatch):
    plain, H0, g0, sizes0 = _run(False, monkeypatch, tol=1e-11, backward_tol=1e-11, low_precision=False)
    packed, H1, g1, sizes1 = _run(True, monkeypatch, tol=1e-11, backward_tol=1e-11, low_precision=False)
    assert sizes0 == [] and sizes1, "the compacted solves never left out a sequence"
    assert min(sizes1) < 8 and all(s <= COMPACT_AT * 8 for s in sizes1[:1])
    for a, b in ((plain.last_stats, packed.last_stats), (plain.last_backward_stats, packed.last_backward_stats)):
        assert torch.equal(a.newton_iterations, b.newton_iterations)
        assert torch.equal(a.code, b.code) and bool(b.converged.all())
        assert torch.allclose(a.residual, b.residual, rtol=1e-6, atol=1e-15)
    # the batches' iterations differ (else there is nothing to compact): the test can fail
    assert int(packed.last_stats.newton_iterations.max()) > int(packed.last_stats.newton_iterations.min()) + 3
    assert torch.allclose(H0, H1, rtol=0, atol=1e-12)
    assert torch.allclose(g0, g1, rtol=1e-9, atol=1e-12)


def test_compacted_gradients_match_the_direct_adjoint(monkeypatch):
    _, _, got, _ = _run(True, monkeypatch, tol=1e-12, backward_tol=1e-12, low_precision=False)
    _, _, want, _ = _run(False, monkeypatch, tol=1e-12, backward_solver="direct")
    assert torch.allclose(got, want, rtol=1e-8, atol=1e-10), float((got - want).abs().max())


def test_float32_mixed_precision_with_compaction_and_fallback(monkeypatch):
    """float32 with the bfloat16 first pass where the CPU has it, and the float64 fallback:
    compacted and not, every sequence converges and the gradients agree to float32's tol."""
    results = [
        _run(c, monkeypatch, dtype=torch.float32, tol=1e-5, backward_tol=1e-5, backward_fallback="float64")
        for c in (False, True)
    ]
    for layer, *_ in results:
        assert bool(layer.last_stats.converged.all()) and bool(layer.last_backward_stats.converged.all())
    (_, H0, g0, _), (_, H1, g1, sizes) = results
    assert sizes
    assert float((H0 - H1).norm() / H0.norm()) < 1e-4
    assert float((g0 - g1).norm() / g0.norm()) < 1e-4


def test_state_stows_finished_samples_in_batch_order():
    """AndersonState alone, plain iteration x <- a x + c with a different contraction a per
    sample: samples cut out of the working set keep their results in their own batch rows, and
    every sample its own iteration count."""
    a = torch.tensor([[0.9], [0.1], [0.7], [0.3], [0.5]], dtype=torch.float64)
    c = torch.tensor([[1.0], [100.0], [1e-3], [10.0], [-2.0]], dtype=torch.float64)
    rows_seen = []

    def restrict(rows):
        rows_seen.append(rows.tolist())
        sa, sc = a[rows], c[rows]
        return (lambda x: sa * x + sc), (lambda x: x.norm(dim=-1)), None

    results = []
    for r in (None, restrict):
        state = AndersonState(torch.zeros(5, 1, dtype=torch.float64), tol=1e-10, memory=0, beta=1.0)
        state.run(lambda x: a * x + c, lambda x: x.norm(dim=-1), 0, 500, restrict=r)
        results.append(state.finish())
    (x0, it0, res0, code0), (x1, it1, res1, code1) = results
    assert rows_seen and all(sorted(r) == r for r in rows_seen) and len(rows_seen[-1]) == 1
    assert rows_seen[-1] == [0]  # the slowest contraction is the last left
    assert torch.allclose(x1, c / (1 - a), rtol=1e-9) and bool((code1 == int(ResultCode.CONVERGED)).all())
    assert torch.equal(it0, it1) and torch.equal(x0, x1) and torch.equal(code0, code1) and torch.equal(res0, res1)
    assert len(set(it1.tolist())) == 5


@pytest.mark.parametrize(
    "setting, device, want",
    [("auto", "cpu", True), ("auto", "cuda", False), (False, "cpu", False), (True, "cuda", True)],
)
def test_compact_option(setting, device, want):
    from inn.solvers.anderson import compaction_pays

    assert compaction_pays(torch.device(device), setting) is want


def test_forward_fallback_solves_a_trained_walks_stall_in_float64():
    """A walk of the paper-scale b = 0.5 training set on which the epoch-5 INN's float32
    Anderson solve needs more than ``fallback_after`` iterations or fails (NONFINITE after 77
    steps where it was found), while the float64 copy of the same system converges in 20: with
    the default ``fallback`` the solve ends converged, the fallback counted, and its state is
    the float64 solution's."""
    from inn.checkpoints import load_checkpoint
    from inn.solvers import ConvergenceWarning, solve

    model, _ = load_checkpoint("tests/fixtures/walks_b05_inn_epoch5.pt")
    walk = torch.load("tests/fixtures/walks_b05_forward_stall.pt", weights_only=True)
    mask = torch.ones(1, walk["x"].shape[0], dtype=torch.bool)
    system = model.rnn.system(walk["x"][None], mask)
    options = {k: v for k, v in model.rnn.options.items() if k not in ("fallback", "fallback_after")}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # float32 alone may miss tol: what the fallback is for
        _, alone = solve(system, "anderson", fallback=None, **options)
        # one float32 candidate cut at 40 steps: float32 rounding differs between CPUs, and this
        # walk's float32 solves end anywhere from NONFINITE after 77 steps to converged in 84,
        # or in 26 from the one-step candidate; what is tested is the float64 step after them
        H, stats = solve(system, "anderson", fallback_after=40, candidates=("zeros",), **options)
        H64, reference = solve(system.in_precision(torch.float64), "anderson", tol=1e-10, max_iter=500)
    assert not bool(alone.converged[0]) or int(alone.newton_iterations[0]) > 40
    assert bool(stats.converged[0]) and stats.extra["fallback"] == 1
    assert int(stats.candidate[0]) == 1  # the float64 solve, after the one float32 candidate
    assert bool(reference.converged[0])
    assert float((H.double() - H64).norm() / H64.norm()) < 1e-3


def test_forward_fallback_starts_from_where_float32_stopped():
    """At a tol float32 cannot certify (1e-9), every float32 candidate stops short of it; the
    float64 retry then starts from their best iterate, a few steps from the fixed point, and
    needs far fewer iterations than the same float64 system solved from zero."""
    from inn.batches import collate
    from inn.checkpoints import load_checkpoint
    from inn.data.walk import generate_walks
    from inn.solvers import ConvergenceWarning, solve

    model, _ = load_checkpoint("tests/fixtures/walks_b05_inn_epoch5.pt")
    batch = collate([{"x": x, "y": y} for x, y in generate_walks(4, 0.5, 10, 3, max_len=20, min_len=20)])
    system = model.rnn.system(batch["x"], batch["mask"])
    options = {k: v for k, v in model.rnn.options.items() if k not in ("fallback", "fallback_after", "tol")}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        _, alone = solve(system, "anderson", tol=1e-9, fallback=None, max_iter=40, **options)
        _, stats = solve(system, "anderson", tol=1e-9, fallback="float64", fallback_after=40, **options)
        _, fresh = solve(system.in_precision(torch.float64), "anderson", tol=1e-9, **options)
    assert not bool(alone.converged.any())
    assert bool(stats.converged.all()) and stats.extra == {"fallback": 4}
    retry = stats.newton_iterations - alone.newton_iterations  # the float64 iterations
    assert bool(fresh.converged.all())
    assert bool((retry * 2 < fresh.newton_iterations).all()), (retry, fresh.newton_iterations)


def test_homotopy_fallback_solves_a_trained_walks_fold():
    """A walk (n = 23) of the paper-scale b = 0.5 training set on which the epoch-12 INN's
    every local solve stalls, float32 and float64, at a relative residual of about 2e-3 (a
    fold: a local minimum of ||H - F(H)|| that is no root). The default fallback's homotopy
    ends at a fixed point: its float64 residual below 1e-10 when Newton finishes it, inside the
    box where Brouwer's theorem puts one, far from where Anderson stalled."""
    from inn.checkpoints import load_checkpoint
    from inn.solvers import ConvergenceWarning, solve

    model, _ = load_checkpoint("tests/fixtures/walks_b05_inn_seed3_epoch12.pt")
    walk = torch.load("tests/fixtures/walks_b05_seed3_epoch12_fold.pt", weights_only=True)
    mask = torch.ones(1, walk["x"].shape[0], dtype=torch.bool)
    system = model.rnn.system(walk["x"][None], mask)
    options = {k: v for k, v in model.rnn.options.items() if k != "fallback"}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # 200 x 200 LUs, one sequence: a second thread only waits (5 s against 28 s loaded)
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            stalled, local = solve(system, "anderson", fallback="float64", **options)
            H, stats = solve(system, "anderson", **options)
            precise = system.in_precision(torch.float64)
            H64, newton = solve(precise, "newton_direct", tol=1e-10, start=H.double(), candidates=["zeros"])
    finally:
        torch.set_num_threads(threads)
    assert not bool(local.converged[0]) and local.extra["fallback"] == 1
    assert float(local.residual[0]) > 1e-3
    assert bool(stats.converged[0]) and stats.extra == {"fallback": 1, "homotopy": 1}
    assert int(newton.candidate[0]) == 0 and bool(newton.converged[0])  # finished from the homotopy's state
    assert float(H64.abs().max()) <= 1.0 + 1e-9  # the box max(1, |h_s|, |h_e|): h_s = h_e = 0
    assert float((H.double() - H64).norm() / H64.norm()) < 1e-6  # float32 round-off of the float64 state
    assert float((H64 - stalled.double()).norm()) > 1.0
