"""The layer, its solvers and training on CUDA, against the CPU in float64 (skipped without a GPU).

CI has no GPU, so these run where one is present (a developer's GPU machine): every forward
solver and adjoint solver on the GPU must give the CPU's states and gradients, parallel cyclic
reduction (the GPU's tridiagonal solve) must equal a dense solve, float32 solves on the GPU
must converge with padded positions inert, and a model trained on the GPU must load and score
on the CPU.
"""

import copy
import importlib.util

import pandas as pd
import pytest
import torch
from conftest import make_batch, make_layer

from inn.solvers import ADJOINT_SOLVERS, SOLVERS, solve
from inn.solvers.tridiagonal import Tridiagonal

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
CUDA = torch.device("cuda")


def _problem(B=4, n=9, lengths=(9, 4, 1, 7)):
    layer = make_layer(scale=1.5)
    xi, mask = make_batch(B=B, n=n, lengths=list(lengths))
    return layer, xi, mask


def _on_cuda(layer, *tensors):
    return (copy.deepcopy(layer).to(CUDA), *(t.to(CUDA) for t in tensors))


@pytest.mark.parametrize("method", ["pcr", "triton"])
@pytest.mark.parametrize("n", [1, 2, 7, 33, 100])
def test_tridiagonal_on_cuda_against_dense_solve(method, n):
    if method == "triton":
        pytest.importorskip("triton")
    B, k = 3, 5
    gen = torch.Generator().manual_seed(n)
    keep, s = (
        torch.rand(B, n, k, generator=gen, dtype=torch.float64),
        torch.rand(B, n, k, generator=gen, dtype=torch.float64),
    )
    keep = 0.999 * keep
    keep[0] = 0.999  # z near 0 everywhere: a near-pure diffusion (z = 0 exactly is ill-conditioned at large n)
    lower, upper, b = keep * s, keep * (1 - s), torch.randn(B, n, k, generator=gen, dtype=torch.float64)
    dense = torch.eye(n, dtype=torch.float64).repeat(B, k, 1, 1)
    t = torch.arange(n)
    dense[..., t[1:], t[:-1]] = -lower[:, 1:].transpose(1, 2)
    dense[..., t[:-1], t[1:]] = -upper[:, :-1].transpose(1, 2)
    expected = torch.linalg.solve(dense, b.transpose(1, 2).unsqueeze(-1)).squeeze(-1).transpose(1, 2)
    solver = Tridiagonal(lower.to(CUDA), upper.to(CUDA), method)
    assert torch.allclose(solver.solve(b.to(CUDA)).cpu(), expected, rtol=1e-10, atol=1e-10)
    lower_t, upper_t = Tridiagonal.transposed_coefficients(lower, upper)
    expected_t = torch.linalg.solve(dense.mT, b.transpose(1, 2).unsqueeze(-1)).squeeze(-1).transpose(1, 2)
    solver_t = Tridiagonal(lower_t.to(CUDA), upper_t.to(CUDA), method)
    assert torch.allclose(solver_t.solve(b.to(CUDA)).cpu(), expected_t, rtol=1e-10, atol=1e-10)


def test_default_tridiagonal_method_on_cuda():
    expected = "triton" if importlib.util.find_spec("triton") else "pcr"
    assert Tridiagonal.default_method(CUDA) == expected


def test_layer_with_pcr_equals_the_default_on_cuda(monkeypatch):
    layer, xi, mask = _problem()
    layer.options.update(tol=1e-11)
    layer.backward_options.update(backward_tol=1e-11)
    cuda_layer, xi_c, mask_c = _on_cuda(layer, xi, mask)
    results = []
    for method in (None, "pcr"):
        if method:
            monkeypatch.setattr(Tridiagonal, "default_method", staticmethod(lambda device: method))
        x = xi_c.clone().requires_grad_(True)
        H = cuda_layer(x, mask_c)
        H.pow(2).sum().backward()
        results.append((H.detach(), x.grad))
    assert torch.allclose(results[0][0], results[1][0], atol=1e-9)
    assert torch.allclose(results[0][1], results[1][1], atol=1e-8)


@pytest.mark.parametrize("method", sorted(SOLVERS))
def test_every_solver_on_cuda_reaches_the_cpu_states(method):
    layer, xi, mask = _problem()
    ref, _ = solve(layer.system(xi, mask), "newton_direct", tol=1e-12)
    cuda_layer, xi_c, mask_c = _on_cuda(layer, xi, mask)
    H, stats = solve(
        cuda_layer.system(xi_c, mask_c), method, tol=1e-11, max_iter=2000 if method == "fixed_point" else None
    )
    assert H.is_cuda and stats.converged.all(), stats.summary()
    assert torch.allclose(H.cpu(), ref, atol=1e-9)
    assert (H[~mask_c] == 0).all()


@pytest.mark.parametrize("method", sorted(ADJOINT_SOLVERS))
def test_every_adjoint_solver_on_cuda_gives_the_cpu_gradients(method):
    layer, xi, mask = _problem()
    layer.options.update(tol=1e-12)
    layer.backward_options.update(backward_solver="direct")
    x = xi.clone().requires_grad_(True)
    layer(x, mask).pow(2).sum().backward()
    expected = torch.cat([x.grad.flatten()] + [p.grad.flatten() for p in layer.parameters()])

    cuda_layer, xi_c, mask_c = _on_cuda(layer, xi, mask)
    cuda_layer.backward_options.update(backward_solver=method, backward_tol=1e-11, backward_max_iter=2000)
    x = xi_c.clone().requires_grad_(True)
    cuda_layer(x, mask_c).pow(2).sum().backward()
    assert cuda_layer.last_backward_stats.converged.all()
    got = torch.cat([x.grad.flatten()] + [p.grad.flatten() for p in cuda_layer.parameters()])
    assert torch.allclose(got.cpu(), expected, atol=1e-8)


@pytest.mark.parametrize("solver", ["anderson", "newton_krylov"])
def test_float32_on_cuda_converges_with_padding_inert(solver):
    layer = make_layer(input_size=16, hidden=64, dtype=torch.float32, solver=solver).to(CUDA)
    xi, mask = make_batch(B=6, n=40, input_size=16, lengths=[40, 3, 17, 40, 1, 29], dtype=torch.float32)
    xi, mask = xi.to(CUDA), mask.to(CUDA)
    with torch.no_grad():
        H = layer(xi, mask)
        stats = layer.last_stats
        alone = layer(xi[2:3, :17], mask[2:3, :17])
    assert stats.converged.all() and (stats.residual <= 1e-4).all(), stats.summary()
    assert (H[~mask] == 0).all()
    assert torch.allclose(H[2, :17], alone[0], atol=1e-4)


def test_train_on_cuda_then_score_on_cpu(tmp_path):
    from inn.data.walk import generate_walks, save_walks
    from inn.experiment.evaluate import evaluate_checkpoint
    from inn.experiment.train import TrainConfig, train

    data = tmp_path / "walks"
    for split, n, seed in (("train", 60, 1), ("dev", 20, 2), ("test", 20, 3)):
        save_walks(data / f"{split}.pt", generate_walks(n, b=1.0, dim=3, seed=seed, max_len=12))
    cfg = TrainConfig(max_epochs=4, patience=5, lr=0.5, word_dropout=0.25)
    options = {"hidden_size": 10, "solver_options": {"tol": 1e-4, "max_iter": 20}}
    history = train("walks", data, "inn", tmp_path / "run", cfg, options, device="cuda")
    assert history.train_loss.iloc[-1] < history.train_loss.iloc[0]
    assert history.nonconverged.eq(0).all() and history.newton_iters.gt(0).all()
    metrics, predictions = evaluate_checkpoint(tmp_path / "run" / "checkpoint.pt", data, "test", device="cpu")
    assert metrics["device"] == "cuda" and 0 <= metrics["error"] <= 1
    assert isinstance(predictions, pd.DataFrame) and len(predictions) > 0


def test_benchmark_on_cuda(tmp_path):
    from inn.experiment.benchmark import main

    out = tmp_path / "bench.tsv"
    main(
        [
            "--device",
            "cuda",
            "--hidden",
            "8",
            "--lengths",
            "4",
            "8",
            "--batch-size",
            "3",
            "--repeats",
            "1",
            "--methods",
            "anderson",
            "newton_krylov",
            "--out",
            str(out),
        ]
    )
    rows = pd.read_csv(out, sep="\t")
    assert set(rows.device) == {"cuda"} and (rows.forward_s > 0).all()
    assert (rows[rows.method == "anderson"].failed == 0).all()


def test_forced_mixed_precision_on_cuda_reaches_the_float64_solution():
    """On a GPU the bfloat16 first pass is off by default ("auto"); forced, it must still end at
    float32's answer (bfloat16 products on the GPU, float32 test)."""
    layer64 = make_layer(hidden=32, scale=1.5, tol=1e-12, backward_tol=1e-12)
    xi, mask = make_batch(B=4, n=12, lengths=[12, 7, 12, 3])
    target = torch.randn(4, 12, 32, dtype=torch.float64)
    x64 = xi.clone().requires_grad_(True)
    (layer64(x64, mask) * target).sum().backward()
    ref = layer64(xi, mask).detach()
    grads64 = torch.cat([x64.grad.flatten()] + [p.grad.flatten() for p in layer64.parameters()])
    layer = make_layer(
        hidden=32,
        dtype=torch.float32,
        tol=1e-5,
        backward_tol=1e-5,
        solver="anderson",
        low_precision=True,
        backward_low_precision=True,
    )
    layer.load_state_dict({k: v.float() for k, v in layer64.state_dict().items()})
    layer, x, m, t = _on_cuda(layer, xi.float(), mask, target.float())
    x.requires_grad_(True)
    H = layer(x, m)
    (H * t).sum().backward()
    assert layer.last_stats.converged.all() and layer.last_backward_stats.converged.all()
    assert float((H.detach().double().cpu() - ref).norm() / ref.norm()) < 1e-4
    grads = torch.cat([x.grad.flatten()] + [p.grad.flatten() for p in layer.parameters()]).double().cpu()
    assert float((grads - grads64).norm() / grads64.norm()) < 1e-4
