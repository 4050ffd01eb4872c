"""The benchmark command's pieces: the power-law fit, the checkpoint loader, a tiny run."""

import csv
import math

import pytest
import torch
from conftest import TINY_BENCHMARK, benchmark_rows, tiny_pos_config

from inn.errors import InnError
from inn.experiment.benchmark import jacobian_radius, load_layer_weights, main, make_harder
from inn.experiment.timing import fit_power_law
from inn.nn import ImplicitGRU, ImplicitLSTM


def test_fit_power_law_recovers_exponent():
    ns = [10, 20, 40, 80]
    a, p, r2 = fit_power_law(ns, [0.17 * n**1.8 for n in ns])
    assert math.isclose(a, 0.17, rel_tol=1e-9) and math.isclose(p, 1.8, rel_tol=1e-9) and r2 > 0.999999
    # a skipped length (no time) is left out of the fit, not fitted as log(inf)
    assert fit_power_law(ns, [0.17 * n**1.8 for n in ns[:3]] + [math.inf])[1] == pytest.approx(1.8)
    assert all(math.isnan(v) for v in fit_power_law(ns, [1.0, math.inf, math.nan, 0.0]))
    # two lengths give a slope but no quality: a line through two points fits them exactly
    a, p, r2 = fit_power_law(ns, [0.1, 0.2, 0.0, math.nan])
    assert p == pytest.approx(1.0) and math.isnan(r2)


def test_fit_table_says_which_lengths_it_fitted():
    """The range and count of the lengths a fit used, not of every length tried."""
    import pandas as pd

    from inn.experiment.timing import fit_table

    times = {10: 0.1, 20: 0.2, 40: 0.45, 80: math.nan}
    fit = fit_table(pd.DataFrame({"model": "inn", "n": list(times), "seconds": list(times.values())}), ["model"]).iloc[
        0
    ]
    assert (fit.points, fit.n_min, fit.n_max) == (3, 10, 40) and 0.9 < fit.r2 < 1


def test_checkpoint_loader_takes_prefix(tmp_path):
    layer = ImplicitGRU(3, 4)
    path = tmp_path / "ckpt.pt"
    torch.save({"model": {f"encoder.{k}": v for k, v in layer.state_dict().items()}, "epoch": 3}, path)
    cfg, input_size, state = load_layer_weights(path, "encoder")
    assert torch.equal(state["weight_c"], layer.weight_c) and (cfg.kind, cfg.hidden_size, input_size) == ("inn", 4, 3)
    with pytest.raises(InnError, match="encoder"):
        load_layer_weights(path, "decoder.")
    plain = tmp_path / "plain.pt"
    torch.save(layer.state_dict(), plain)
    assert set(load_layer_weights(plain)[2]) == set(layer.state_dict())
    with pytest.raises(InnError, match=r"no inn_lstm layer weights under prefix '': .* --model \(inn, inn_lstm\)"):
        load_layer_weights(plain, model="inn_lstm")  # an implicit GRU's weights are not an implicit LSTM's
    torch.save({"weight_x": layer.weight_x}, plain)  # no recurrent weights: no layer
    with pytest.raises(InnError, match="no inn layer weights"):
        load_layer_weights(plain)


def test_the_layer_of_a_trained_models_checkpoint_is_found(tmp_path):
    """A checkpoint as training writes it: the layer sits under ``rnn.`` of a whole model."""
    from inn.checkpoints import neural_payload
    from inn.models import build_model

    model = build_model(tiny_pos_config("inn", 4))
    path = tmp_path / "checkpoint.pt"
    torch.save(neural_payload(model, {"task": "pos"}), path)
    for prefix in ("rnn.", "rnn", ""):  # given, without its dot, or left out
        cfg, _, state = load_layer_weights(path, prefix)
        assert torch.equal(state["weight_zr"], model.rnn.weight_zr) and cfg == model.config
    with pytest.raises(InnError, match="is a whole inn model: its layer is 'rnn.'; leave --prefix out"):
        load_layer_weights(path, "encoder.")
    with pytest.raises(InnError, match="holds a trained inn, not inn_lstm: leave --model out or give --model inn"):
        load_layer_weights(path, model="inn_lstm")
    rows = benchmark_rows(
        tmp_path / "b.tsv", TINY_BENCHMARK, "--methods anderson --baselines gru --prefix rnn. --checkpoint", path
    )
    assert "checkpoint" in {r["weights"] for r in rows}


def test_harder_weights_scale_the_implicit_lstm_as_well(tmp_path):
    """A harder weight set of the implicit LSTM (``--model inn_lstm``): its own recurrent
    matrices scaled until dF/dH has the spectral radius asked for, so its row there needs more
    iterations than at initialisation."""
    torch.manual_seed(0)
    layer = ImplicitLSTM(6, 6).double()
    xi, mask = torch.randn(3, 8, 6, dtype=torch.float64), torch.ones(3, 8, dtype=torch.bool)
    assert jacobian_radius(layer, xi, mask) < 0.7
    assert make_harder(layer, xi, mask, 0.8) > 1 and jacobian_radius(layer, xi, mask) == pytest.approx(0.8, abs=0.01)
    rows = benchmark_rows(
        tmp_path / "bench.tsv",
        "--model inn_lstm --hidden 6 --lengths 8 --batch-size 3 --repeats 1 --harder 0.9",
        "--methods anderson --baselines --peers --dtype float64",
    )
    iterations = {(r["weights"], r["cell"]): float(r["newton_mean"]) for r in rows}
    assert iterations[("harder0.9", "lstm")] > iterations[("init", "lstm")]


def test_a_trained_implicit_lstm_is_benchmarked_on_its_own_weights(tmp_path, capsys):
    """A state_dict of an implicit LSTM (``--model inn_lstm``): every method of the
    checkpoint's weight set solves it, the gradients agree with the exact gradient of that
    layer, the rows say cell "lstm", and their ratio is to the BiLSTM."""
    torch.manual_seed(3)
    layer = ImplicitLSTM(5, 4)
    ckpt = tmp_path / "lstm.pt"
    torch.save({"state_dict": {f"rnn.{k}": v for k, v in layer.state_dict().items()}}, ckpt)
    rows = benchmark_rows(
        tmp_path / "bench.tsv",
        TINY_BENCHMARK,
        "--model inn_lstm --harder --methods anderson newton_krylov --baselines lstm gru --peers",
        "--prefix rnn --checkpoint",
        ckpt,
    )
    cells = {(r["weights"], r["method"]): r["cell"] for r in rows}
    assert cells == {
        ("init", "anderson"): "lstm",
        ("init", "newton_krylov"): "lstm",
        ("init", "bilstm"): "",
        ("init", "bigru"): "",
        ("checkpoint", "anderson"): "lstm",
        ("checkpoint", "newton_krylov"): "lstm",
        ("checkpoint", "bilstm"): "",
        ("checkpoint", "bigru"): "",
    }
    for r in rows:
        if r["weights"] == "checkpoint" and r["cell"]:
            assert int(r["hidden"]) == 4 and float(r["grad_error"]) < 1e-2 and int(r["failed"]) == 0
    table = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("checkpoint")]
    by_method = {line[3]: line for line in table}
    ratio = float(by_method["anderson"][7])
    bilstm = next(r for r in rows if r["weights"] == "checkpoint" and r["method"] == "bilstm")
    anderson = next(r for r in rows if r["weights"] == "checkpoint" and r["method"] == "anderson")
    assert math.isclose(
        ratio, float(anderson["forward_backward_s"]) / float(bilstm["forward_backward_s"]), rel_tol=0.01, abs_tol=0.006
    )


def test_tiny_benchmark_run_writes_csv(tmp_path, capsys):
    layer = ImplicitGRU(6, 6)
    ckpt = tmp_path / "c.pt"
    torch.save({"model": {f"inn.{k}": v for k, v in layer.state_dict().items()}}, ckpt)
    rows = benchmark_rows(
        tmp_path / "bench.tsv",
        "--hidden 6 --lengths 3 5 --batch-size 2 --repeats 1 --harder 0.5 --peers --prefix inn. --checkpoint",
        ckpt,
        "--methods paper newton_krylov newton_direct anderson fixed_point anderson_jacobian_free",
    )
    # gradients against the tight exact adjoint: the exact solvers' to about tol, the
    # Jacobian-free one measurably off
    for r in rows:
        if r["method"] == "anderson":
            assert float(r["grad_error"]) < 1e-2 and float(r["grad_cosine"]) > 0.999
        if r["method"] == "anderson_jacobian_free":
            assert float(r["grad_error"]) > 10 * float(
                next(
                    q["grad_error"]
                    for q in rows
                    if q["method"] == "anderson" and q["weights"] == r["weights"] and q["n"] == r["n"]
                )
            )
    assert {r["weights"] for r in rows} == {"init", "harder0.5", "checkpoint"}
    assert {r["method"] for r in rows} >= {"paper", "anderson", "bigru", "bilstm"}
    assert all(float(r["forward_s"]) > 0 for r in rows)
    fits = list(csv.DictReader((tmp_path / "bench_fits.tsv").open(), delimiter="\t"))
    assert all(math.isfinite(float(f["forward_backward_s_p"])) for f in fits)
    assert "fits t = a" in capsys.readouterr().out


def test_a_model_that_is_not_implicit_is_refused(tmp_path):
    with pytest.raises(
        InnError, match="--model bilstm: not an implicit model of the registry; use one of inn, inn_lstm"
    ):
        main(["--model", "bilstm", "--hidden", "4", "--lengths", "3", "--out", str(tmp_path / "b.tsv")])


def test_torchdeq_peers_solve_the_same_system_to_our_tolerance(tmp_path):
    """TorchDEQ's rows: every sequence at tol in OUR residual definition (recomputed here
    from the layer's F at a solution solved by our own solver), F evaluations counted."""
    pytest.importorskip("torchdeq")
    from inn.experiment.peers import PEERS, Peer

    torch.manual_seed(0)
    layer = ImplicitGRU(5, 5, solver="anderson", tol=1e-6)
    xi, mask = torch.randn(3, 6, 5), torch.ones(3, 6, dtype=torch.bool)
    with torch.no_grad():
        ours = layer(xi, mask)
    for name in PEERS:
        peer = Peer(name, layer, xi, mask, torch.randn(3, 6, 5), tol=1e-5)
        figures = peer.figures()
        assert figures["failed"] == 0 and figures["residual_max"] <= 1e-5
        assert figures["function_evals"] >= figures["newton_mean"] >= 1
        assert torch.allclose(peer.forward(), ours, atol=1e-4)
    assert figures["backward_residual_max"] <= 1e-5 and figures["backward_iterations"] >= 1
    out = tmp_path / "b.tsv"
    peers = "--harder --methods anderson --baselines gru --peers torchdeq_anderson torchdeq_ift"
    rows = {r["method"]: r for r in benchmark_rows(out, TINY_BENCHMARK, peers)}
    assert set(rows) == {"anderson", "torchdeq_anderson", "torchdeq_ift", "bigru"}
    assert not rows["torchdeq_anderson"]["forward_backward_s"]  # a forward-only peer: no time, empty
    assert float(rows["torchdeq_ift"]["forward_backward_s"]) > 0
    # a peer too slow to repeat keeps the time of its one forward, as our methods do
    slow = "--harder --methods anderson --baselines --peers torchdeq_anderson --max-seconds 1e-9"
    rows = {r["method"]: r for r in benchmark_rows(out, TINY_BENCHMARK, slow)}
    assert rows["torchdeq_anderson"]["note"] == "timed once" and float(rows["torchdeq_anderson"]["forward_s"]) > 0


def test_torchdeq_ift_on_an_implicit_lstm_gives_our_gradient():
    """TorchDEQ's IFT row on the implicit LSTM: its loss is on the layer's output (h of the
    [h; c] state), so its gradient is ours."""
    pytest.importorskip("torchdeq")
    from inn.experiment.peers import IFT, Peer

    torch.manual_seed(1)
    layer = ImplicitLSTM(5, 4, solver="anderson", tol=1e-8)
    xi, mask, target = torch.randn(3, 6, 5), torch.ones(3, 6, dtype=torch.bool), torch.randn(3, 6, 4)
    (layer(xi, mask) * target).sum().backward()
    ours = [p.grad.clone() for p in layer.parameters()]
    Peer(IFT, layer, xi, mask, target, tol=1e-8).forward_backward()
    for mine, theirs in zip(ours, (p.grad for p in layer.parameters())):
        assert torch.allclose(mine, theirs, atol=1e-4, rtol=1e-3)


def test_peers_are_validated_and_skipped_without_torchdeq(tmp_path, monkeypatch, capsys):
    with pytest.raises(InnError, match="unknown peer"):
        main(["--peers", "scipy_anderson", "--out", str(tmp_path / "x.tsv")])
    monkeypatch.setattr("inn.experiment.benchmark.available", lambda: False)
    rows = benchmark_rows(tmp_path / "b.tsv", TINY_BENCHMARK, "--harder --methods anderson --baselines")
    printed = capsys.readouterr().out
    assert "TorchDEQ peers skipped" in printed and "fits t = a" not in printed  # one length: no fits
    assert {r["method"] for r in rows} == {"anderson"}


def test_the_cuda_graph_method_is_skipped_with_a_note_on_a_cpu(tmp_path):
    graph = "--harder --device cpu --methods anderson anderson_graph --baselines --peers"
    rows = {r["method"]: r for r in benchmark_rows(tmp_path / "bench.tsv", TINY_BENCHMARK, graph)}
    assert rows["anderson_graph"]["note"] == "skipped: CUDA graphs need a CUDA device"
    assert not rows["anderson_graph"]["forward_s"] and float(rows["anderson"]["forward_s"]) > 0  # no time: empty


def test_one_length_writes_no_fits_and_refuses_a_fits_path(tmp_path, capsys):
    out = tmp_path / "bench.tsv"
    rows = benchmark_rows(out, TINY_BENCHMARK, "--harder --methods anderson --baselines gru --peers")
    assert {r["method"] for r in rows} == {"anderson", "bigru"}
    assert not (tmp_path / "bench_fits.tsv").exists()  # was a file of NaN fits
    assert "fits t = a" not in capsys.readouterr().out
    with pytest.raises(InnError, match="--fits-out needs at least two --lengths"):
        main(
            [
                *TINY_BENCHMARK.split(),
                "--methods",
                "anderson",
                "--out",
                str(out),
                "--fits-out",
                str(tmp_path / "fits.tsv"),
            ]
        )


def _walks_checkpoint(path, hidden=4, **solver_options):
    """A tiny whole walks INN as training saves it (b = 0.5, token loss)."""
    from inn.checkpoints import neural_payload
    from inn.models import ModelConfig, build_model

    torch.manual_seed(0)
    model = build_model(
        ModelConfig(
            task="walks",
            kind="inn",
            hidden_size=hidden,
            num_classes=2,
            input_dim=3,
            solver="anderson",
            solver_options={"tol": 1e-4, **solver_options},
        )
    )
    meta = {"task": "walks", "model": "inn", "dataset": "b0.5", "settings": {"training": {"loss": "token"}}}
    torch.save(neural_payload(model, meta), path)
    return path


def test_breakdown_reports_each_training_batch(tmp_path, capsys):
    """--breakdown: one row per batch with forward and adjoint iterations, limit hits and their
    codes, F evaluations, Jacobian products, and a time split that adds up to the total."""
    ckpt = _walks_checkpoint(
        tmp_path / "inn.pt", backward_max_iter=2, backward_low_precision=False, backward_fallback=None
    )
    out = tmp_path / "breakdown.tsv"
    rows = benchmark_rows(
        out,
        "--breakdown --checkpoint",
        ckpt,
        "--lengths 3 6 --batches 2 --batch-size 4 --baselines gru lstm --threads 1 --clock process --device cpu",
    )
    assert [(int(r["n"]), int(r["batch_index"])) for r in rows] == [(3, 0), (3, 1), (6, 0), (6, 1)]
    for r in rows:
        assert float(r["forward_mean"]) >= 1 and int(r["forward_max"]) >= float(r["forward_mean"])
        # two adjoint iterations cannot reach 1e-4: every sequence stops at the limit, and says so
        assert int(r["adjoint_max"]) == 2 and int(r["adjoint_limit"]) == 4 and r["adjoint_codes"] == "MAX_ITERATIONS:4"
        assert int(r["forward_limit"]) == 0 and r["forward_codes"] == ""
        assert int(r["function_evals"]) >= int(r["forward_max"]) and int(r["jacobian_products"]) >= 2
        parts = sum(float(r[c]) for c in ("solve_s", "F_s", "adjoint_s", "rest_s"))
        assert parts == pytest.approx(float(r["total_s"]), rel=1e-4, abs=1e-6)  # (the TSV keeps 7 digits)
        assert (
            float(r["solve_s"]) > 0
            and float(r["adjoint_s"]) > 0
            and float(r["bigru_s"]) > 0
            and float(r["bilstm_s"]) > 0
        )
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:3] == ["n", "batches", "fwd"] and [line.split()[0] for line in table[1:3]] == ["3", "6"]
    # the same batches with the direct float64 fallback: every sequence solved again, none left at the limit
    fallback = "--lengths 3 --batches 1 --batch-size 4 --baselines --fallback direct --device cpu"
    (row,) = benchmark_rows(out, "--breakdown --checkpoint", ckpt, fallback)
    assert (int(row["adjoint_fallback"]), int(row["adjoint_limit"]), row["adjoint_codes"]) == (4, 0, "")
    assert (int(row["forward_fallback"]), int(row["forward_homotopy"])) == (0, 0)
    # one forward iteration per solve: the float64 retry fails too, and the homotopy finishes every sequence
    ckpt = _walks_checkpoint(tmp_path / "short.pt", max_iter=1, candidates=["zeros"])
    (row,) = benchmark_rows(
        out, "--breakdown --checkpoint", ckpt, "--lengths 3 --batches 1 --batch-size 4 --baselines --device cpu"
    )
    assert (int(row["forward_fallback"]), int(row["forward_homotopy"]), int(row["forward_limit"])) == (4, 4, 0)
    assert row["forward_codes"] == ""


def test_breakdown_needs_a_whole_implicit_model(tmp_path):
    layer = tmp_path / "layer.pt"
    torch.save(ImplicitGRU(3, 4).state_dict(), layer)
    with pytest.raises(InnError, match="--breakdown needs --checkpoint"):
        main(["--breakdown", "--lengths", "3", "--out", str(tmp_path / "b.tsv")])
    with pytest.raises(InnError, match=r"layer.pt is not an inn model file \(no model in it\)"):
        main(["--breakdown", "--checkpoint", str(layer), "--lengths", "3", "--out", str(tmp_path / "b.tsv")])
    from inn.checkpoints import neural_payload
    from inn.models import ModelConfig, build_model

    explicit = tmp_path / "bilstm.pt"
    model = build_model(ModelConfig(task="walks", kind="bilstm", hidden_size=3, num_classes=2, input_dim=3))
    torch.save(neural_payload(model, {"task": "walks", "dataset": "b0.5"}), explicit)
    with pytest.raises(InnError, match="bilstm.pt is not an implicit model's checkpoint: --breakdown needs a whole"):
        main(["--breakdown", "--checkpoint", str(explicit), "--lengths", "3", "--out", str(tmp_path / "b.tsv")])


@pytest.mark.parametrize(
    "name", ["walks_b05_inn_epoch5.pt", "walks_b05_inn_seed2_epoch8.pt", "walks_b05_inn_seed3_epoch12.pt"]
)
def test_breakdown_of_the_b05_walks_fixtures_meets_their_trained_systems(tmp_path, name):
    """The b = 0.5 walks INNs after epochs 5, 8 and 12 (tests/fixtures/README.md): one batch of 20
    walks of 8 steps through the whole model, its own loss; the trained systems take more than a
    fresh layer's handful of forward iterations."""
    from pathlib import Path

    fixture = Path(__file__).parent / "fixtures" / name
    options = "--lengths 8 --batches 1 --baselines --threads 1 --device cpu"
    (row,) = benchmark_rows(tmp_path / "fixture.tsv", "--breakdown --checkpoint", fixture, options)
    assert int(row["hidden"]) == 200 and int(row["batch"]) == 20
    assert float(row["forward_mean"]) > 10 and float(row["adjoint_mean"]) > 5


def test_fixture_batches_give_the_trained_walks_model_fresh_full_length_walks():
    from pathlib import Path

    from inn.experiment.breakdown import fixture_batches

    fixture = Path(__file__).parent / "fixtures" / "walks_b05_inn_epoch5.pt"
    model, meta, batches = fixture_batches(str(fixture), 7, 3)
    assert model.training and meta["dataset"] == "b0.5" and len(batches) == 3
    assert all(batch["mask"].shape == (20, 7) and bool(batch["mask"].all()) for batch in batches)
    assert not torch.equal(batches[0]["x"], batches[1]["x"])  # a new seed each batch
    _, _, again = fixture_batches(str(fixture), 7, 3)
    assert all(torch.equal(a["x"], b["x"]) for a, b in zip(batches, again))  # and the same ones each time
