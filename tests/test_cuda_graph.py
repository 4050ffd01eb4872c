"""CUDA graphs of the Anderson solves (inn.solvers.cuda_graph) and the sync-free stepping they capture.

On the CPU: the chunked, sync-free segments (inn.solvers.anderson.anderson_chunked, the code a
graph captures) take exactly the eager loop's steps, forward and adjoint, GRU and LSTM; the
batch tensors reload into static copies; the options are validated; ``cuda_graph=True`` on a
CPU solves eagerly with one warning. With a CUDA device (skipped without): graph replays
against the eager loop, the fallback when a capture fails, and a layer's forward and backward
with graphs against without.
"""

import warnings

import pytest
import torch
from conftest import make_batch, make_layer

from inn.errors import InnError
from inn.nn import ImplicitGRU, ImplicitLSTM
from inn.solvers import ResultCode, cuda_graph, solve
from inn.solvers import anderson as anderson_module
from inn.solvers._common import batch_norm
from inn.solvers.anderson import SWEEPS, anderson_chunked, anderson_iterate, chunk_length, first_chunk_step

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.fixture(autouse=True)
def _fresh_graph_state(monkeypatch):
    """Each test starts with no captured graphs and no warnings given."""
    monkeypatch.setattr(cuda_graph, "_WARNED", set())
    monkeypatch.setattr(cuda_graph, "_CACHE", type(cuda_graph._CACHE)())
    monkeypatch.setattr(cuda_graph, "_EVICTED", set())


def _layer(cell: str, scale: float = 1.5, **options):
    torch.manual_seed(1)
    if cell == "gru":
        return make_layer(scale=scale, **options)
    layer = ImplicitLSTM(5, 6, **options).double()
    with torch.no_grad():
        for p in layer.recurrent_weights():
            p.mul_(scale)
    return layer


def _problem(cell: str, device: str = "cpu"):
    """Five sequences of different lengths with padding; the length-1 one converges at once."""
    layer = _layer(cell).to(device)
    xi, mask = make_batch(B=5, n=9, lengths=[9, 4, 1, 7, 6])
    return layer, xi.to(device), mask.to(device)


def _same(eager, chunked):
    """The solution, iterations, residuals and codes are the same, bit for bit."""
    return all(torch.equal(a, b) for a, b in zip(eager[:4], chunked[:4]))


@pytest.mark.parametrize("cell", ["gru", "lstm"])
@pytest.mark.parametrize("steps", [1, 5, 7, 10])
def test_chunked_steps_are_the_eager_steps_forward(cell, steps):
    layer, xi, mask = _problem(cell)
    system = layer.system(xi, mask)
    H0 = torch.zeros(system.shape, dtype=torch.float64)
    first = system.step_from_zero()
    build = lambda sy: (SWEEPS["tridiagonal"](sy), batch_norm)  # noqa: E731
    for max_iter in (200, 12, 4):  # converged; some samples out of iterations (the eager tail); no room for a chunk
        eager = anderson_iterate(
            SWEEPS["tridiagonal"](system), H0, batch_norm, tol=1e-11, max_iter=max_iter, first=first
        )
        chunked = anderson_chunked(build, system, H0, tol=1e-11, max_iter=max_iter, first=first, steps=steps)
        assert _same(eager, chunked)
        assert chunked[4] >= eager[4] and chunked[5] == eager[5] == 0  # (extra steps after all stopped)
        its, code = eager[1], eager[3]
        assert its.min() < its.max()  # samples stopped at different steps
        if max_iter == 200:
            assert (code == int(ResultCode.CONVERGED)).all() and its.max() > first_chunk_step(5) + chunk_length(
                steps, 5
            )
        else:
            assert (code == int(ResultCode.MAX_ITERATIONS)).any() and (code == int(ResultCode.CONVERGED)).any()


@pytest.mark.parametrize("cell", ["gru", "lstm"])
@pytest.mark.parametrize("memory, beta, steps", [(3, 0.7, 4), (0, 0.8, 3), (1, 1.0, 5), (2, 1.0, 6)])
def test_chunked_steps_are_the_eager_steps_jacobi_and_memories(cell, memory, beta, steps):
    """The Jacobi sweep (no reported residual, no check), damping (the x ring buffer), memory 0
    to 2 (other chunk starts), two stacked candidates per sequence (groups)."""
    layer, xi, mask = _problem(cell)
    system = layer.system(xi, mask).repeat(2)
    H0 = torch.cat(
        [
            torch.zeros(system.shape[0] // 2, *system.shape[1:], dtype=torch.float64),
            layer.system(xi, mask).initial_guess("random", torch.Generator().manual_seed(0)),
        ]
    )
    options = dict(tol=1e-9, max_iter=60, groups=2, memory=memory, beta=beta)
    eager = anderson_iterate(system.F, H0, batch_norm, **options)
    chunked = anderson_chunked(lambda sy: (sy.F, batch_norm), system, H0, steps=steps, **options)
    assert _same(eager, chunked)
    assert eager[1].min() < eager[1].max()


def test_between_solves_the_state_is_its_buffers(monkeypatch):
    """A replay reads and writes the state's buffers, and the host reads the state's fields: a
    reused state's fields must be its buffers after every solve, whichever way it ended."""
    layer, xi, mask = _problem("gru")
    system = layer.system(xi, mask)
    H0 = torch.zeros(system.shape, dtype=torch.float64)
    kept = {}

    def reused(key, inputs, x, first, make_state):  # one state for all solves, as a cache entry's
        if "state" not in kept:
            kept["state"] = make_state(x)
        return cuda_graph.EagerSegments(inputs, x, first, kept["state"])

    monkeypatch.setattr(cuda_graph, "segments", reused)
    build = lambda sy: (SWEEPS["tridiagonal"](sy), batch_norm)  # noqa: E731
    for max_iter in (200, 12, 200):  # converged in chunks; ended in the eager tail; again
        eager = anderson_iterate(SWEEPS["tridiagonal"](system), H0, batch_norm, tol=1e-11, max_iter=max_iter)
        assert _same(eager, anderson_chunked(build, system, H0, tol=1e-11, max_iter=max_iter))
        state = kept["state"]
        assert all(getattr(state, name) is buffer for name, buffer in state._buffers.items())


class _NoHostReads(cuda_graph.EagerSegments):
    """Segments run with every way of reading a tensor's value on the host refused (what a CUDA
    graph capture refuses: syncs, and outputs whose size depends on the data)."""

    def run(self, name, segment):
        def refuse(what):
            def method(*args, **kwargs):
                raise AssertionError(f"a segment read a tensor on the host ({what})")

            return method

        getitem = torch.Tensor.__getitem__

        def index(tensor, key):
            if any(isinstance(part, torch.Tensor) for part in (key if isinstance(key, tuple) else (key,))):
                raise AssertionError("a segment indexed with a tensor")
            return getitem(tensor, key)

        with pytest.MonkeyPatch.context() as patch:
            for what in ("__bool__", "__float__", "__int__", "__index__", "item", "tolist", "cpu", "numpy", "nonzero"):
                patch.setattr(torch.Tensor, what, refuse(what))
            patch.setattr(torch, "nonzero", refuse("torch.nonzero"))
            patch.setattr(torch, "masked_select", refuse("torch.masked_select"))
            patch.setattr(torch.Tensor, "__getitem__", index)
            segment()


@pytest.mark.parametrize("cell", ["gru", "lstm"])
@pytest.mark.parametrize("tridiagonal", ["thomas", "pcr"])
def test_segments_read_nothing_on_the_host(cell, tridiagonal, monkeypatch):
    """Forward and adjoint segments, with the CPU's and the GPU's (without Triton) tridiagonal
    solves, take the eager steps without reading any tensor value on the host."""
    from inn.solvers.adjoint import _adjoint_anderson
    from inn.solvers.tridiagonal import Tridiagonal

    monkeypatch.setattr(Tridiagonal, "default_method", staticmethod(lambda device: tridiagonal))
    layer, xi, mask = _problem(cell)
    system = layer.system(xi, mask)
    H, _ = solve(system, "anderson", tol=1e-11)
    g = torch.randn(system.shape, dtype=torch.float64) * system.maskf
    eager = _adjoint_anderson(system.linearize(H), g, tol=1e-11, max_iter=200)
    first = system.step_from_zero()
    H0 = torch.zeros(system.shape, dtype=torch.float64)
    forward = anderson_iterate(SWEEPS["tridiagonal"](system), H0, batch_norm, tol=1e-11, max_iter=200, first=first)
    monkeypatch.setattr(
        cuda_graph, "segments", lambda key, inputs, x, first, make_state: _NoHostReads(inputs, x, first, make_state(x))
    )
    monkeypatch.setattr(cuda_graph, "use", lambda setting, device, obstacle=None: True)
    chunked = anderson_chunked(
        lambda sy: (SWEEPS["tridiagonal"](sy), batch_norm), system, H0, tol=1e-11, max_iter=200, first=first
    )
    assert _same(forward, chunked)
    u, stats = _adjoint_anderson(system.linearize(H), g, tol=1e-11, max_iter=200, cuda_graph=True)
    assert torch.equal(u, eager[0]) and torch.equal(stats.newton_iterations, eager[1].newton_iterations)
    assert stats.converged.all() and stats.newton_iterations.max() > 10  # (chunks ran)


def _graphs_on_the_cpu(monkeypatch):
    """Let the CPU take the chunked path (segments run as they are: no CUDA device to capture
    on) and count the chunked solves."""
    calls = []

    def chunked(*args, **kwargs):
        calls.append(kwargs["kind"])
        return anderson_chunked(*args, **kwargs)

    monkeypatch.setattr(cuda_graph, "use", lambda setting, device, obstacle=None: setting is not False and not obstacle)
    monkeypatch.setattr(anderson_module, "anderson_chunked", chunked)
    return calls


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_a_layer_in_chunked_segments_matches_the_eager_layer(cell, monkeypatch):
    """Forward and adjoint solves in segments: the same states, gradients and statistics, with
    padding, a warm start of the adjoint and trainable boundaries (no step from zero)."""
    calls = _graphs_on_the_cpu(monkeypatch)
    for trainable in (False, True):
        results = []
        for graphed in (False, True):
            layer, xi, mask = _problem(cell)
            if trainable:
                layer._boundaries(True)
                with torch.no_grad():
                    layer.h_start.fill_(0.1)
            # (compaction off: the eager loop's steps exactly, to the last bit)
            layer.solver, layer.options = (
                "anderson",
                {"tol": 1e-11, "cuda_graph": graphed, "cuda_graph_steps": 5, "compact": False},
            )
            x = xi.clone().requires_grad_(True)
            out = layer(x, mask)
            out.pow(2).sum().backward()
            layer.adjoint_start = layer.last_adjoint  # a second backward from a warm start
            layer(x, mask).sum().backward()
            results.append(
                (
                    out.detach(),
                    x.grad,
                    [p.grad for p in layer.parameters()],
                    layer.last_stats,
                    layer.last_backward_stats,
                )
            )
        (out0, gx0, gp0, st0, bst0), (out1, gx1, gp1, st1, bst1) = results
        assert torch.equal(out0, out1) and torch.equal(gx0, gx1)
        assert all(torch.equal(a, b) for a, b in zip(gp0, gp1))
        for a, b in ((st0, st1), (bst0, bst1)):
            assert torch.equal(a.newton_iterations, b.newton_iterations) and torch.equal(a.code, b.code)
            assert torch.equal(a.residual, b.residual) and b.converged.all()
    assert calls.count("forward tridiagonal") == 4 and calls.count("adjoint tridiagonal") == 4


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_systems_and_linearisations_reload_into_static_copies(cell):
    layer, xi, mask = _problem(cell)
    xi2 = torch.randn_like(xi)
    systems = [layer.system(x, mask) for x in (xi, xi2)]
    H = [solve(sy, "anderson", tol=1e-10)[0] for sy in systems]
    lins = [sy.linearize(h) for sy, h in zip(systems, H)]
    for one, other, V in ((systems[0], systems[1], H[1]), (lins[0], lins[1], H[1])):
        static = one.static_clone()
        names = set(one.tensors())
        assert names == set(static.tensors()) == set(other.tensors())
        assert {"X", "mask", "weights.0", "h_end"} <= names or {"system.X", "copy.1", "F"} <= names
        assert all(static.tensors()[k].data_ptr() != t.data_ptr() for k, t in one.tensors().items())
        assert cuda_graph.signature(static) == cuda_graph.signature(other)
        static.load_(other)
        assert all(torch.equal(static.tensors()[k], t) for k, t in other.tensors().items())
        product = (lambda o, v: o.F(v)) if one is systems[0] else (lambda o, v: o.vjp(v))
        assert torch.equal(product(static, V), product(other, V))
        assert not torch.equal(product(one, V), product(other, V))  # the clone left the original alone


def test_cuda_graph_options_are_validated():
    for bad, message in (
        ("yes", "cuda_graph must be true, false or 'auto', not 'yes'"),
        (1, "cuda_graph must be true, false or 'auto', not 1"),
    ):
        with pytest.raises(InnError, match=message):
            ImplicitGRU(5, 6, solver="anderson", cuda_graph=bad)
    for bad in (0, 2.5, True):
        with pytest.raises(InnError, match="cuda_graph_steps must be a positive integer"):
            ImplicitGRU(5, 6, solver="anderson", cuda_graph_steps=bad)
    with pytest.raises(InnError, match="backward_cuda_graph must be true, false or 'auto', not 'on'"):
        ImplicitGRU(5, 6, solver="anderson", backward_cuda_graph="on")
    with pytest.raises(InnError, match="has no option 'cuda_graph'"):
        ImplicitGRU(5, 6, solver="newton_krylov", cuda_graph=True)
    layer, xi, mask = _problem("gru")
    with pytest.raises(InnError, match="cuda_graph must be true, false or 'auto', not 'x'"):
        solve(layer.system(xi, mask), "anderson", cuda_graph="x")


def test_the_setting_resolves_by_device():
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # none of these warns
        assert cuda_graph.use("auto", gpu) and cuda_graph.use(True, gpu)
        assert not cuda_graph.use("auto", cpu) and not cuda_graph.use(False, gpu) and not cuda_graph.use(False, cpu)
    with pytest.warns(cuda_graph.CudaGraphWarning, match="red_black sweep checks its true residual on the host"):
        assert not cuda_graph.use("auto", gpu, "the red_black sweep checks its true residual on the host")


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_cuda_graph_true_on_a_cpu_solves_eagerly_with_one_warning(cell):
    layer, xi, mask = _problem(cell)
    layer.solver, layer.options = "anderson", {"tol": 1e-10}
    x = xi.clone().requires_grad_(True)
    expected = layer(x, mask)
    expected.sum().backward()
    for setting in ("auto", True):
        layer.options["cuda_graph"] = setting
        y = xi.clone().requires_grad_(True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = layer(y, mask)
            out.sum().backward()
            layer(y, mask)
        graph_warnings = [w for w in caught if issubclass(w.category, cuda_graph.CudaGraphWarning)]
        assert len(graph_warnings) == (1 if setting is True else 0)  # once per process, not per solve
        if graph_warnings:
            assert "not on a CUDA device: solving eagerly" in str(graph_warnings[0].message)
        assert torch.equal(out, expected) and torch.equal(y.grad, x.grad)


# --------------------------------------------------------------------------- on a CUDA device


def _eager_and_graphed(system, H0, first, tol=1e-11):
    build = lambda sy: (SWEEPS["tridiagonal"](sy), batch_norm)  # noqa: E731
    eager = anderson_iterate(SWEEPS["tridiagonal"](system), H0, batch_norm, tol=tol, max_iter=200, first=first)
    graphed = anderson_chunked(build, system, H0, tol=tol, max_iter=200, first=first, kind="test")
    return eager, graphed


def _close(eager, graphed):
    return (
        torch.allclose(eager[0], graphed[0], rtol=0, atol=1e-12)
        and torch.equal(eager[1], graphed[1])
        and torch.allclose(eager[2], graphed[2], rtol=1e-6, atol=1e-20)
        and torch.equal(eager[3], graphed[3])
    )


def test_the_cache_keeps_the_most_recently_used_and_warns_when_it_thrashes(monkeypatch):
    """Past CACHE_SIZE the least recently used signature goes; making it again is thrash: one
    warning that names the remedy, and the entry is made anew."""
    monkeypatch.setattr(cuda_graph, "CACHE_SIZE", 2)
    made = []

    def make(name):
        return lambda: made.append(name) or name

    assert cuda_graph.cached(("a",), make("a")) == ("a", True)
    assert cuda_graph.cached(("b",), make("b")) == ("b", True)
    assert cuda_graph.cached(("a",), make("a")) == ("a", False)  # a is now the most recent
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cuda_graph.cached(("c",), make("c")) == ("c", True)  # b goes: a first-time make warns not
    assert list(cuda_graph._CACHE) == [("a",), ("c",)] and made == ["a", "b", "c"]
    with pytest.warns(cuda_graph.CudaGraphWarning, match="captured again.*CACHE_SIZE"):
        assert cuda_graph.cached(("b",), make("b")) == ("b", True)
    assert list(cuda_graph._CACHE) == [("c",), ("b",)] and made == ["a", "b", "c", "b"]


@needs_cuda
@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_graph_replays_take_the_eager_steps(cell):
    """The first solve of a shape captures its segments (keeping the warm-up's result); a second
    batch of the same shape replays them from static copies: both as the eager loop."""
    layer, xi, mask = _problem(cell, "cuda")
    for x in (xi, torch.randn_like(xi)):
        system = layer.system(x, mask)
        H0 = torch.zeros(system.shape, dtype=torch.float64, device="cuda")
        eager, graphed = _eager_and_graphed(system, H0, system.step_from_zero())
        assert _close(eager, graphed)
        assert (graphed[3] == int(ResultCode.CONVERGED)).all() and eager[1].min() < eager[1].max()
    (entry,) = cuda_graph._CACHE.values()
    assert set(entry.graphs) == {"start", "chunk"} and not entry.eager


@needs_cuda
def test_a_failed_capture_warns_once_and_solves_eagerly(monkeypatch):
    layer, xi, mask = _problem("gru", "cuda")
    system_type = type(layer.system(xi, mask))
    step = system_type.tridiagonal_step

    def syncing_step(self, H, with_residual=False):
        float(H.sum())  # a host sync: not capturable
        return step(self, H, with_residual)

    monkeypatch.setattr(system_type, "tridiagonal_step", syncing_step)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for x in (xi, torch.randn_like(xi)):
            system = layer.system(x, mask)
            H0 = torch.zeros(system.shape, dtype=torch.float64, device="cuda")
            eager, graphed = _eager_and_graphed(system, H0, system.step_from_zero())
            assert _close(eager, graphed)
    messages = [str(w.message) for w in caught if issubclass(w.category, cuda_graph.CudaGraphWarning)]
    assert len(messages) == 1 and "capturing a CUDA graph of the Anderson solve failed" in messages[0]
    (entry,) = cuda_graph._CACHE.values()
    assert entry.eager and not entry.graphs


@needs_cuda
@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_a_layer_with_graphs_matches_the_eager_layer_on_cuda(cell):
    results = []
    for setting in (False, "auto"):
        layer, xi, mask = _problem(cell, "cuda")
        layer.solver, layer.options = "anderson", {"tol": 1e-11, "cuda_graph": setting}
        for _ in range(2):  # the second call replays
            x = xi.clone().requires_grad_(True)
            out = layer(x, mask)
            out.pow(2).sum().backward()
        results.append((out.detach(), x.grad, layer.last_stats, layer.last_backward_stats))
    (out0, g0, st0, bst0), (out1, g1, st1, bst1) = results
    assert torch.allclose(out0, out1, rtol=0, atol=1e-10) and torch.allclose(g0, g1, rtol=1e-8, atol=1e-10)
    assert torch.equal(st0.newton_iterations, st1.newton_iterations) and st1.converged.all()
    assert torch.equal(bst0.newton_iterations, bst1.newton_iterations) and bst1.converged.all()
    kinds = {key[0][0] for key in cuda_graph._CACHE}
    assert kinds == {"forward tridiagonal", "adjoint tridiagonal"}
    assert all(entry.graphs and not entry.eager for entry in cuda_graph._CACHE.values())


@needs_cuda
def test_the_red_black_sweep_is_not_captured_and_says_so():
    layer, xi, mask = _problem("gru", "cuda")
    with pytest.warns(cuda_graph.CudaGraphWarning, match="red_black sweep"):
        H, stats = solve(layer.system(xi, mask), "anderson", sweep="red_black", tol=1e-10, cuda_graph=True)
    assert stats.converged.all() and not cuda_graph._CACHE


@needs_cuda
def test_the_benchmark_times_the_graphed_method_on_cuda(tmp_path):
    import csv

    from inn.experiment.benchmark import main

    out = tmp_path / "bench.tsv"
    main(
        [
            "--hidden",
            "8",
            "--lengths",
            "5",
            "9",
            "--batch-size",
            "3",
            "--repeats",
            "1",
            "--harder",
            "--device",
            "cuda",
            "--methods",
            "anderson",
            "anderson_graph",
            "--baselines",
            "--peers",
            "--out",
            str(out),
        ]
    )
    rows = [r for r in csv.DictReader(out.open(), delimiter="\t") if r["method"] == "anderson_graph"]
    assert len(rows) == 2 and all(float(r["forward_backward_s"]) > 0 and int(r["failed"]) == 0 for r in rows)
    assert all(float(r["grad_error"]) < 1e-2 for r in rows)
