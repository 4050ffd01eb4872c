"""The benchmark command's pieces: the power-law fit, the checkpoint loader, a tiny run."""

import csv
import math

import pytest
import torch

from inn.benchmark import fit_power_law, load_layer_weights, main
from inn.errors import InnError
from inn.nn import ImplicitGRU


def test_fit_power_law_recovers_exponent():
    ns = [10, 20, 40, 80]
    a, p, r2 = fit_power_law(ns, [0.17 * n**1.8 for n in ns])
    assert math.isclose(a, 0.17, rel_tol=1e-9) and math.isclose(p, 1.8, rel_tol=1e-9) and r2 > 0.999999


def test_checkpoint_loader_takes_prefix(tmp_path):
    layer = ImplicitGRU(3, 4)
    path = tmp_path / "ckpt.pt"
    torch.save({"model": {f"encoder.{k}": v for k, v in layer.state_dict().items()}, "epoch": 3}, path)
    state = load_layer_weights(path, "encoder")
    assert torch.equal(state["weight_c"], layer.weight_c)
    with pytest.raises(InnError, match="encoder"):
        load_layer_weights(path, "decoder.")
    plain = tmp_path / "plain.pt"
    torch.save(layer.state_dict(), plain)
    assert set(load_layer_weights(plain)) == set(layer.state_dict())


def test_tiny_benchmark_run_writes_csv(tmp_path):
    layer = ImplicitGRU(6, 6)
    ckpt = tmp_path / "c.pt"
    torch.save({"model": {f"inn.{k}": v for k, v in layer.state_dict().items()}}, ckpt)
    out = tmp_path / "bench.csv"
    main(["--hidden", "6", "--lengths", "3", "5", "--batch", "2", "--repeats", "1", "--harder", "0.5",
          "--methods", "paper", "newton_krylov", "newton_direct", "anderson", "fixed_point",
          "--checkpoint", str(ckpt), "--prefix", "inn.", "--out", str(out)])
    rows = list(csv.DictReader(out.open()))
    assert {r["weights"] for r in rows} == {"init", "harder0.5", "checkpoint"}
    assert {r["method"] for r in rows} >= {"paper", "anderson", "bigru", "bilstm"}
    assert all(float(r["forward_s"]) > 0 for r in rows)
    fits = list(csv.DictReader((tmp_path / "bench_fits.csv").open()))
    assert all(math.isfinite(float(f["forward_backward_s_p"])) for f in fits)


def test_implicit_lstm_is_a_method_beside_the_bilstm(tmp_path):
    out = tmp_path / "bench.csv"
    main(["--hidden", "4", "--lengths", "3", "5", "--batch", "2", "--repeats", "1", "--harder",
          "--methods", "implicit_lstm", "--baselines", "lstm", "--out", str(out)])
    rows = list(csv.DictReader(out.open()))
    assert sorted({r["method"] for r in rows}) == ["bilstm", "implicit_lstm"]
    lstm = [r for r in rows if r["method"] == "implicit_lstm"]
    assert len(lstm) == 2 and all(int(r["failed"]) == 0 and float(r["newton_mean"]) > 0 for r in lstm)
    assert all(float(r["forward_backward_s"]) > 0 for r in rows)
