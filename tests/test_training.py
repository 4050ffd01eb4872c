"""Models, training, evaluation and the perceptron peer on tiny slices (seconds each)."""

from __future__ import annotations

import dataclasses
import json

import pandas as pd
import pytest
import torch
from conftest import benchmark_rows, evaluate_argv, tiny_walks, train_argv

from inn.checkpoints import load_checkpoint, sealed
from inn.data.corpora import EWT_FILES
from inn.errors import InnError
from inn.experiment.evaluate import evaluate_checkpoint, score_pos, score_walks
from inn.experiment.prepare import prepare_pos
from inn.experiment.train import TrainConfig, WarmStarts, train
from inn.models import parse_model_name

TINY_FEATURES = dict(max_words=3000, max_affixes=300, word_dim=8, affix_dim=2)  # 8 + 12 + 8 = 28
INN_FAST = {"solver": "newton_krylov", "solver_options": {"tol": 1e-4, "max_iter": 20, "krylov_max_iter": 20}}


def ewt_files(ewt_dir):
    """A conllu corpus source: EWT's three files, XPOS tags."""
    return {"tags": "xpos", **{split: str(ewt_dir / name) for split, name in EWT_FILES.items()}}


@pytest.fixture(scope="session")
def pos_dir(tmp_path_factory, ewt_dir):
    out = tmp_path_factory.mktemp("pos") / "ewt"
    prepare_pos("conllu", ewt_files(ewt_dir), out, "ewt", **TINY_FEATURES)
    return out


@pytest.fixture(scope="session")
def walk_dir(tmp_path_factory):
    return tiny_walks(tmp_path_factory.mktemp("walks") / "b0.5")


def _cfg(**kw) -> TrainConfig:
    base = dict(max_train=40, max_dev=20, max_epochs=3, patience=5, lr=0.5, word_dropout=0.25)
    return TrainConfig(**{**base, **kw})


def _no_timing(history: pd.DataFrame) -> pd.DataFrame:
    return history.drop(columns=["seconds", "cpu_seconds"], errors="ignore")


def test_model_names():
    assert parse_model_name("bilstm-h300") == ("bilstm", 300)
    assert parse_model_name("inn") == ("inn", None)
    assert parse_model_name("inn_lstm-h30") == ("inn_lstm", 30)
    with pytest.raises(InnError, match="unknown model 'transformer'"):
        parse_model_name("transformer")


@pytest.mark.parametrize("name", ["gru", "lstm", "bigru", "bilstm", "inn"])
def test_every_pos_model_learns(tmp_path, pos_dir, name):
    options = {"hidden_size": 12, **(INN_FAST if name == "inn" else {})}
    history = train("pos", pos_dir, name, tmp_path, _cfg(max_epochs=3), options, device="cpu")
    assert len(history) == 3
    assert history.train_loss.iloc[-1] < history.train_loss.iloc[0]
    assert history.dev_accuracy.iloc[-1] > 10
    assert (tmp_path / "checkpoint.pt").is_file() and (tmp_path / "history.tsv").is_file()
    assert not (tmp_path / "last.pt").exists()  # resume state is removed once training finished
    if name == "inn":
        assert {
            "newton_iters",
            "krylov_iters",
            "residual",
            "nonconverged",
            "newton_hist",
            "newton_limit",
            "backward_hist",
            "backward_limit",
            "homotopy",
        } <= set(history.columns)
        assert history.newton_iters.gt(0).all()


def test_solver_tally_bins_iterations_and_counts_limit_hits():
    """The history row's iteration histograms (<= 10, 11-20, 21-40, 41-80, 81-160, > 160) and the
    sequences that stopped at their iteration limit, forward and adjoint, the forward solves
    handed to the homotopy and the adjoints GMRES solved, summed over batches."""
    from types import SimpleNamespace

    from inn.experiment.train import SolverTally
    from inn.solvers import ResultCode, SolverStats

    def stats(iterations, codes, extra=None):
        its = torch.tensor(iterations)
        code = torch.tensor(codes)
        return SolverStats(
            "anderson",
            its,
            torch.zeros_like(its),
            torch.zeros(len(its)),
            code == 0,
            code,
            torch.zeros_like(its),
            extra=extra or {},
        )

    limit = int(ResultCode.MAX_ITERATIONS)
    tally = SolverTally()
    for adjoint in ("anderson", "gmres"):
        tally.add(
            SimpleNamespace(
                last_stats=stats([3, 10, 11, 200], [0, 0, 0, limit], {"fallback": 2, "homotopy": 1}),
                last_backward_stats=stats([41, 81, 230, 230], [0, 0, limit, int(ResultCode.DIVERGED)]),
                last_adjoint_solver=adjoint,
            )
        )
    row = tally.row()
    assert row["backward_gmres"] == 1  # batches whose adjoint GMRES solved
    assert (row["newton_hist"], row["newton_limit"], row["homotopy"]) == ("4/2/0/0/0/2", 2, 2)
    assert (row["backward_hist"], row["backward_limit"], row["backward_nonconverged"]) == ("0/0/0/2/2/4", 2, 4)


@pytest.mark.parametrize("name", ["inn", "bilstm-h8"])
def test_walk_models_learn(tmp_path, walk_dir, name):
    options = {"hidden_size": 10, **INN_FAST} if name == "inn" else {}
    history = train(
        "walks", walk_dir, name, tmp_path, _cfg(max_epochs=4, max_train=None, max_dev=None), options, device="cpu"
    )
    assert history.train_loss.iloc[-1] < history.train_loss.iloc[0]
    assert history.dev_error.between(0, 1).all()


def test_checkpoint_contract_for_timing(tmp_path, pos_dir):
    train(
        "pos",
        pos_dir,
        "inn",
        tmp_path,
        _cfg(max_epochs=1),
        {"hidden_size": None, **INN_FAST},
        device="cpu",
        meta={"dataset": "ewt", "seed": 1},
    )
    model, meta = load_checkpoint(tmp_path / "checkpoint.pt")
    assert not model.training and meta["task"] == "pos" and meta["epochs"] == 1
    assert model.config.hidden_size == model.rnn_input_size == 28  # INN hidden = feature size by default
    xi = torch.randn(20, 7, model.rnn_input_size)
    H = model.hidden_states(xi, torch.ones(20, 7, dtype=torch.bool))
    assert H.shape == (20, 7, 28)
    assert model.rnn.last_stats.converged.shape == (20,)


@pytest.mark.parametrize("model, cell", [("inn", "gru"), ("inn_lstm", "lstm")])
def test_benchmark_feeds_the_trained_layer_real_tokens(tmp_path, pos_dir, model, cell):
    from inn.experiment.benchmark import main as benchmark

    train(
        "pos",
        pos_dir,
        model,
        tmp_path,
        _cfg(max_epochs=1),
        {"hidden_size": 6, **INN_FAST},
        device="cpu",
        meta={"dataset": "ewt", "seed": 1},
    )
    out = tmp_path / "bench.tsv"
    sizes = "--hidden 6 --lengths 3 6 --batch-size 2 --repeats 1 --harder --methods anderson --peers"
    benchmark_rows(out, sizes, f"--baselines {cell} --checkpoint", tmp_path / "checkpoint.pt", "--data", pos_dir)
    rows = pd.read_csv(out, sep="\t")
    trained = rows[(rows.weights == "checkpoint") & (rows.method == "anderson")]
    assert list(trained.n) == [3, 6] and (trained.failed == 0).all() and (trained.newton_mean > 0).all()
    assert (trained.cell == cell).all() and (trained.grad_error < 1e-2).all()
    with pytest.raises(InnError, match="--data needs --checkpoint"):
        benchmark(["--data", str(pos_dir), "--out", str(out)])


def test_resume_equals_uninterrupted(tmp_path, pos_dir):
    cfg = _cfg(max_epochs=3, dropout=0.2)
    straight = train("pos", pos_dir, "bigru", tmp_path / "a", cfg, {"hidden_size": 10}, device="cpu")
    first = train("pos", pos_dir, "bigru", tmp_path / "b", cfg, {"hidden_size": 10}, device="cpu", stop_after=1)
    assert len(first) == 1 and (tmp_path / "b" / "last.pt").is_file()
    resumed = train("pos", pos_dir, "bigru", tmp_path / "b", cfg, {"hidden_size": 10}, device="cpu")
    pd.testing.assert_frame_equal(_no_timing(straight), _no_timing(resumed))
    a = torch.load(tmp_path / "a" / "checkpoint.pt", weights_only=True)["state_dict"]
    b = torch.load(tmp_path / "b" / "checkpoint.pt", weights_only=True)["state_dict"]
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("name", ["inn", "inn_lstm"])
def test_resume_of_the_implicit_model(tmp_path, walk_dir, name):
    cfg = _cfg(max_epochs=2, max_train=None, max_dev=None)
    options = {"hidden_size": 6, **INN_FAST}
    straight = train("walks", walk_dir, name, tmp_path / "a", cfg, options, device="cpu")
    train("walks", walk_dir, name, tmp_path / "b", cfg, options, device="cpu", stop_after=1)
    resumed = train("walks", walk_dir, name, tmp_path / "b", cfg, options, device="cpu")
    pd.testing.assert_frame_equal(_no_timing(straight), _no_timing(resumed))
    assert (straight.nonconverged == 0).all() and straight.newton_iters.gt(0).all()


@pytest.mark.parametrize(
    ("task", "name", "options"),
    [("walks", "inn", {"hidden_size": 6, **INN_FAST}), ("pos", "bigru", {"hidden_size": 10})],
)
def test_a_run_stopped_inside_an_epoch_goes_on_after_its_last_saved_batch(
    tmp_path, walk_dir, pos_dir, monkeypatch, caplog, task, name, options
):
    """A state saved after every batch (``save_every=0``), a stop at epoch 2's fifth batch: the
    rerun goes on after batch 4 and ends where the uninterrupted run does, weights to the bit
    (the INN's warm starts and solver sums, the batch order, word dropout and dropout streams
    carried across the stop)."""
    import inn.experiment.train.epoch as epoch_module

    data = walk_dir if task == "walks" else pos_dir
    cfg = _cfg(
        max_epochs=2, batch_size=5, dropout=0.2, **({"max_train": None, "max_dev": None} if task == "walks" else {})
    )
    straight = train(task, data, name, tmp_path / "a", cfg, options, device="cpu", save_every=None)
    batches = -(-(60 if task == "walks" else 40) // 5)
    real, calls = epoch_module._train_batch, []

    def stopping(*args, **kwargs):
        calls.append(1)
        if len(calls) == batches + 5:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(epoch_module, "_train_batch", stopping)
    with pytest.raises(KeyboardInterrupt):
        train(task, data, name, tmp_path / "b", cfg, options, device="cpu", save_every=0.0)
    monkeypatch.setattr(epoch_module, "_train_batch", real)
    saved = torch.load(tmp_path / "b" / "last.pt", weights_only=True)["train_state"]
    assert saved["epoch"] == 1 and saved["within"]["epoch"] == 2 and saved["within"]["batches"] == 4
    with caplog.at_level("INFO"):
        resumed = train(task, data, name, tmp_path / "b", cfg, options, device="cpu", save_every=0.0)
    assert "after epoch 1 and batch 4 of epoch 2" in caplog.text
    pd.testing.assert_frame_equal(_no_timing(straight), _no_timing(resumed))
    a = torch.load(tmp_path / "a" / "checkpoint.pt", weights_only=True)["state_dict"]
    b = torch.load(tmp_path / "b" / "checkpoint.pt", weights_only=True)["state_dict"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert resumed.seconds.iloc[1] > 0 and not (tmp_path / "b" / "last.pt").exists()


def test_cuda_graphs_may_be_switched_between_stops(tmp_path, walk_dir):
    """CUDA graphs replay the eager steps, so turning them on or off between a run's stops
    resumes it (on a CPU "auto" solves eagerly: the history is the straight run's); the
    solver's tolerance, which changes the solutions, still may not change."""
    cfg = _cfg(max_epochs=2, max_train=None, max_dev=None)
    options = {"hidden_size": 6, "solver": "anderson", "solver_options": {"tol": 1e-4}}
    straight = train("walks", walk_dir, "inn", tmp_path / "a", cfg, options, device="cpu")
    train("walks", walk_dir, "inn", tmp_path / "b", cfg, options, device="cpu", stop_after=1)
    graphed = {
        **options,
        "solver_options": {
            **options["solver_options"],
            "cuda_graph": "auto",
            "backward_cuda_graph": "auto",
            "cuda_graph_steps": 10,
        },
    }
    looser = {**graphed, "solver_options": {**graphed["solver_options"], "tol": 1e-3}}
    with pytest.raises(InnError, match=r"different configuration \(differs in model.solver_options.tol\)"):
        train("walks", walk_dir, "inn", tmp_path / "b", cfg, looser, device="cpu")
    resumed = train("walks", walk_dir, "inn", tmp_path / "b", cfg, graphed, device="cpu")
    pd.testing.assert_frame_equal(_no_timing(straight), _no_timing(resumed))
    saved = torch.load(tmp_path / "b" / "checkpoint.pt", weights_only=True)
    assert saved["meta"]["settings"]["model"]["solver_options"]["cuda_graph"] == "auto"


def test_implicit_lstm_tagger_trains_evaluates_and_times(tmp_path, pos_dir):
    from inn.experiment.timing import time_checkpoint

    train(
        "pos",
        pos_dir,
        "inn_lstm",
        tmp_path,
        _cfg(max_epochs=1),
        {"hidden_size": 10, "solver": "anderson", "solver_options": {"tol": 1e-4}, "forget_max": 0.95},
        device="cpu",
        meta={"dataset": "ewt", "seed": 1},
    )
    model, _ = load_checkpoint(tmp_path / "checkpoint.pt")
    assert type(model.rnn).__name__ == "ImplicitLSTM" and model.rnn.state_size == 20
    assert model.rnn.cell.forget_max == 0.95  # the cap travels in the checkpoint
    with pytest.raises(InnError, match="forget_max caps the implicit LSTM's forget gate; model inn has none"):
        train("pos", pos_dir, "inn", tmp_path / "inn", _cfg(max_epochs=1), {"hidden_size": 10, "forget_max": 0.95})
    H = model.hidden_states(torch.randn(3, 7, model.rnn_input_size), torch.ones(3, 7, dtype=torch.bool))
    assert H.shape == (3, 7, 10) and model.rnn.last_solution.shape == (3, 7, 20)
    metrics, _ = evaluate_checkpoint(tmp_path / "checkpoint.pt", pos_dir, "test", max_sequences=40)
    assert metrics["model"] == "inn_lstm" and metrics["accuracy"] > 10 and metrics["nonconverged"] == 0
    timing = time_checkpoint(str(tmp_path / "checkpoint.pt"), str(pos_dir), [4], repeats=1, batch_size=2)
    assert (timing.model == "inn_lstm").all() and (timing.failed == 0).all() and (timing.newton_iters > 0).all()


def test_warm_starts_keep_each_sequence_state():
    warm = WarmStarts([3, 1, 2], width=2, device=torch.device("cpu"))
    assert warm.gather(torch.tensor([0, 2]), 3) is None  # nothing solved yet: no start
    H = torch.arange(12.0).reshape(2, 3, 2) / 16
    warm.update(torch.tensor([2, 0]), H * torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]).unsqueeze(-1))
    start = warm.gather(torch.tensor([0, 1, 2]), 3)
    assert start.dtype == torch.float16 and start.shape == (3, 3, 2)
    assert torch.equal(start[0], H[1].half()) and torch.equal(start[2, :2], H[0, :2].half())
    assert (start[1] == 0).all() and (start[2, 2] == 0).all()  # not solved yet; padding
    other = WarmStarts([3, 1, 2], width=2, device=torch.device("cpu"))
    other.load_state_dict(warm.state_dict())
    assert torch.equal(other.gather(torch.tensor([0, 1, 2]), 3), start)
    with pytest.raises(InnError, match="warm starts in last.pt belong to other training data"):
        WarmStarts([3, 2, 2], width=2, device=torch.device("cpu")).load_state_dict(warm.state_dict())


#: an implicit GRU of 6 units, its solves by Anderson to 1e-5
ANDERSON_INN = {"hidden_size": 6, "solver": "anderson", "solver_options": {"tol": 1e-5}}


def _cold_and_warm(tmp_path, walk_dir, cfg: TrainConfig, switch: str, kept: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Histories of a walks INN trained with ``cfg``'s warm start ``switch`` off (cold) and on
    (warm). Checks what both kinds of warm start share: epoch 1, with nothing to start from, is
    the cold run's; what they start from (``kept``) travels in last.pt, so a run resumed after
    one epoch starts its solves where the straight one did and ends as it did."""
    cold = train(
        "walks",
        walk_dir,
        "inn",
        tmp_path / "cold",
        dataclasses.replace(cfg, **{switch: False}),
        ANDERSON_INN,
        device="cpu",
    )
    warm = train("walks", walk_dir, "inn", tmp_path / "warm", cfg, ANDERSON_INN, device="cpu")
    pd.testing.assert_frame_equal(_no_timing(cold).iloc[:1], _no_timing(warm).iloc[:1])
    train("walks", walk_dir, "inn", tmp_path / "resumed", cfg, ANDERSON_INN, device="cpu", stop_after=1)
    assert kept in torch.load(tmp_path / "resumed" / "last.pt", weights_only=True)
    resumed = train("walks", walk_dir, "inn", tmp_path / "resumed", cfg, ANDERSON_INN, device="cpu")
    pd.testing.assert_frame_equal(_no_timing(warm), _no_timing(resumed))
    return cold, warm


def test_warm_starts_cut_forward_iterations_and_resume_exactly(tmp_path, walk_dir):
    cfg = _cfg(max_epochs=3, max_train=None, max_dev=None)
    cold, warm = _cold_and_warm(tmp_path, walk_dir, cfg, "warm_start", "warm_starts")
    # later epochs start from the previous epoch's states
    assert (warm.newton_iters.iloc[1:] < cold.newton_iters.iloc[1:]).all()
    assert (warm.nonconverged == 0).all()
    assert abs(warm.dev_error.iloc[-1] - cold.dev_error.iloc[-1]) < 0.05  # the same equations, to tol


def test_checkpoint_from_another_configuration(tmp_path, pos_dir):
    train("pos", pos_dir, "gru", tmp_path, _cfg(), {"hidden_size": 8}, device="cpu", stop_after=1)
    with pytest.raises(
        InnError,
        match=r"last.pt was written by a different configuration \(differs in "
        r"model.hidden_size, training.lr\); delete it",
    ):
        train("pos", pos_dir, "gru", tmp_path, _cfg(lr=0.1), {"hidden_size": 9}, device="cpu")
    # a model setting added since the checkpoint was written counts as its default there
    saved = torch.load(tmp_path / "last.pt", weights_only=True)
    assert saved["settings"]["model"].pop("forget_max") == 1.0
    torch.save(saved, tmp_path / "last.pt")
    # more epochs is not a different configuration: the run resumes and finishes
    history = train("pos", pos_dir, "gru", tmp_path, _cfg(max_epochs=2), {"hidden_size": 8}, device="cpu")
    assert history.epoch.tolist() == [1, 2]
    # the checkpoint says the schedule the run finished under, not that of its best epoch
    train("pos", pos_dir, "gru", tmp_path / "cut", _cfg(max_epochs=4), {"hidden_size": 8}, device="cpu", stop_after=2)
    train("pos", pos_dir, "gru", tmp_path / "cut", _cfg(max_epochs=2), {"hidden_size": 8}, device="cpu")
    saved = torch.load(tmp_path / "cut" / "checkpoint.pt", weights_only=True)
    assert saved["meta"]["epochs"] == 2 and saved["meta"]["settings"]["training"]["max_epochs"] == 2


def test_nan_loss_names_epoch_and_batch_and_keeps_the_last_checkpoint(tmp_path, walk_dir):
    train(
        "walks", walk_dir, "bilstm-h4", tmp_path / "run", _cfg(max_train=None, max_dev=None), device="cpu", stop_after=1
    )
    # a weight gone bad after epoch 1 (the data must stay: last.pt resumes only on its own data)
    saved = torch.load(tmp_path / "run" / "last.pt", weights_only=True)
    saved["state_dict"]["output.weight"][0, 0] = float("nan")
    torch.save(sealed(saved), tmp_path / "run" / "last.pt")  # as if saved so: not damaged
    last = (tmp_path / "run" / "last.pt").read_bytes()
    with pytest.raises(InnError, match=r"loss is nan at epoch 2, batch \d+ of 3; stopped, the last good checkpoint"):
        train("walks", walk_dir, "bilstm-h4", tmp_path / "run", _cfg(max_train=None, max_dev=None), device="cpu")
    assert (tmp_path / "run" / "last.pt").read_bytes() == last


def test_a_solve_gone_non_finite_is_named_as_the_cause(tmp_path, walk_dir):
    """An implicit model's non-finite loss from states that grew without bound (the implicit
    LSTM's cell state c has no bound of its own) says so, not only "lower the rate"."""
    cfg, options = _cfg(max_train=None, max_dev=None), {"hidden_size": 4}
    train("walks", walk_dir, "inn_lstm", tmp_path / "run", cfg, options, device="cpu", stop_after=1)
    saved = torch.load(tmp_path / "run" / "last.pt", weights_only=True)
    saved["state_dict"]["rnn.weight_gates"][4, 0] = float("inf")  # U_f: f (and so c) no longer finite
    torch.save(sealed(saved), tmp_path / "run" / "last.pt")
    with pytest.raises(
        InnError,
        match=r"loss is nan at epoch 2, batch 1 of 3: the implicit layer's forward solve "
        r"went non-finite in \d+ of \d+ sequences \(their states grew without bound.*"
        r"capping the implicit LSTM's forget gate \(inn_lstm_forget_max below 1",
    ):
        train("walks", walk_dir, "inn_lstm", tmp_path / "run", cfg, options, device="cpu")


def test_solver_failures_are_counted_and_strict_mode_stops(tmp_path, walk_dir):
    cfg = _cfg(max_epochs=1, max_train=None, max_dev=None)
    loose = {
        "hidden_size": 6,
        "solver": "newton_krylov",
        "solver_options": {"tol": 1e-12, "max_iter": 1, "krylov_max_iter": 2},
    }
    history = train("walks", walk_dir, "inn", tmp_path / "loose", cfg, loose, device="cpu")
    assert history.nonconverged.iloc[0] > 0 and history.residual.iloc[0] > 1e-12
    strict = {**loose, "solver_options": {**loose["solver_options"], "strict": True}}
    with pytest.raises(InnError, match=r"epoch 1, batch 1: forward solve .* did not reach tol"):
        train("walks", walk_dir, "inn", tmp_path / "strict", cfg, strict, device="cpu")


def test_score_pos_on_hand_made_predictions():
    gold = [[("The", "DT"), ("cat", "NN"), ("sat", "VBD")], [("Zorgs", "NNS"), (".", ".")]]
    predicted = [["DT", "NN", "VBN"], ["NNP", "."]]
    known = {"the", "cat", "sat", "."}
    metrics, table = score_pos(gold, predicted, lambda w: w.lower() in known)
    assert metrics["accuracy"] == pytest.approx(60.0)
    assert metrics["unseen_accuracy"] == 0.0 and metrics["unseen_tokens"] == 1
    assert metrics["tokens"] == 5
    assert metrics["per_tag"]["VBD"] == {"tokens": 1, "accuracy": 0.0}
    assert metrics["per_tag"]["DT"] == {"tokens": 1, "accuracy": 100.0}
    assert table.predicted.tolist() == ["DT", "NN", "VBN", "NNP", "."]
    with pytest.raises(InnError, match="sentence 2: 1 predicted tags for 2 tokens"):
        score_pos(gold, [["DT", "NN", "VBD"], ["."]], lambda w: True)


def test_score_walks_on_hand_made_predictions():
    gold = [torch.tensor([0, 0, 1, 1]), torch.tensor([0, 1])]
    predicted = [torch.tensor([0, 1, 1, 1]), torch.tensor([1, 1])]
    metrics, table = score_walks(gold, predicted)
    assert metrics["error"] == pytest.approx(2 / 6) and metrics["steps"] == 6
    assert table.step.tolist() == [1, 2, 3, 4, 1, 2]


def test_evaluate_a_trained_tagger(tmp_path, pos_dir):
    train(
        "pos",
        pos_dir,
        "bilstm",
        tmp_path,
        _cfg(max_epochs=2),
        {"hidden_size": 8},
        device="cpu",
        meta={"dataset": "ewt", "seed": 3, "scale": "quick"},
    )
    metrics, table = evaluate_checkpoint(tmp_path / "checkpoint.pt", pos_dir, "test", device="cpu", max_sequences=50)
    assert metrics["metric"] == "accuracy" and 0 < metrics["accuracy"] <= 100
    assert metrics["tokens"] == len(table) and metrics["unseen_tokens"] > 0
    for key in (
        "task",
        "dataset",
        "model",
        "seed",
        "scale",
        "per_tag",
        "unseen_accuracy",
        "parameters",
        "epochs",
        "seconds_per_epoch",
        "device",
        "hidden_size",
        "training",
    ):
        assert metrics[key] is not None, key
    assert (metrics["model"], metrics["seed"], metrics["epochs"], metrics["training"]["batch_size"]) == (
        "bilstm",
        3,
        2,
        20,
    )


def test_evaluation_refuses_other_vocabularies(tmp_path, pos_dir, ewt_dir):
    train("pos", pos_dir, "gru", tmp_path / "run", _cfg(max_epochs=1), {"hidden_size": 8}, device="cpu")
    other = tmp_path / "other"
    prepare_pos("conllu", ewt_files(ewt_dir), other, "ewt", **{**TINY_FEATURES, "max_words": 100})
    with pytest.raises(
        InnError,
        match=r"run/checkpoint.pt was trained on other data \(ewt, fingerprint \w+\) than "
        r".*/other \(fingerprint \w+\): evaluate it on the folder it was trained on",
    ):
        evaluate_checkpoint(tmp_path / "run" / "checkpoint.pt", other, "test", device="cpu")


def test_perceptron_peer_on_a_small_slice(tmp_path, pos_dir):
    from inn.experiment.cli import main

    out = tmp_path / "perceptron"
    assert (
        main(
            [
                "train-perceptron",
                "--data",
                str(pos_dir),
                "--out-dir",
                str(out),
                "--max-train",
                "300",
                "--iterations",
                "2",
            ]
        )
        == 0
    )
    history = pd.read_csv(out / "history.tsv", sep="\t")
    assert len(history) == 1 and history.dev_accuracy.iloc[0] > 70
    # where it trained, as a neural run's history records it (the report's header counts it)
    assert (history.device.iloc[0], history.threads.iloc[0]) == ("cpu", 1)
    assert main(evaluate_argv(out / "checkpoint.pt", pos_dir, out, "--max-sequences", "100")) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["model"] == "perceptron" and metrics["task"] == "pos"
    assert (metrics["device"], metrics["threads"]) == ("cpu", 1)
    assert 70 < metrics["accuracy"] < 100 and metrics["unseen_accuracy"] < metrics["accuracy"]
    assert (out / "predictions.tsv").is_file()


def test_cli_reports_bad_settings_in_one_line(tmp_path, pos_dir, capsys):
    from inn.experiment.cli import main

    assert main(train_argv("pos", pos_dir, "gru", tmp_path, "--settings", '{"training": {"learning_rate": 1}}')) == 2
    assert (
        capsys.readouterr().err.strip().startswith("error: --settings: training.learning_rate: unknown key (allowed: ")
    )
    assert main(evaluate_argv(tmp_path / "none.pt", pos_dir, tmp_path)) == 2
    missing = f"model file not found: {tmp_path / 'none.pt'} (nothing of a close name in {tmp_path})"
    assert missing in capsys.readouterr().err


def test_adjoint_warm_starts_keep_the_gradients_and_resume_exactly(tmp_path, walk_dir):
    """The previous epoch's adjoints, kept in last.pt. On these walks they are never closer than
    the preconditioned start from zero (dL/dH moves more between epochs than H does): the
    choice costs its one counted iteration, and the run learns as without them."""
    cfg = _cfg(max_epochs=3, max_train=None, max_dev=None, warm_start_adjoint=True)
    cold, warm = _cold_and_warm(tmp_path, walk_dir, cfg, "warm_start_adjoint", "warm_adjoints")
    assert (warm.backward_iters.iloc[1:] <= cold.backward_iters.iloc[1:] + 1.05).all()
    assert (warm.backward_nonconverged == 0).all()
    assert abs(warm.dev_error.iloc[-1] - cold.dev_error.iloc[-1]) < 0.05  # the same gradients, to tol


def test_jacobian_regularisation_adds_to_the_loss_and_trains(tmp_path, walk_dir):
    cfg = _cfg(max_epochs=2, max_train=None, max_dev=None)
    plain = train("walks", walk_dir, "inn", tmp_path / "plain", cfg, ANDERSON_INN, device="cpu")
    reg = train(
        "walks",
        walk_dir,
        "inn",
        tmp_path / "reg",
        dataclasses.replace(cfg, jacobian_weight=5.0, jacobian_every=2),
        ANDERSON_INN,
        device="cpu",
    )
    assert "jacobian_fro2" not in plain and (reg.jacobian_fro2 > 0).all()
    # the penalty's gradient changes the training (train_loss itself is the task's loss alone)
    assert (reg.train_loss - plain.train_loss).abs().max() > 1e-6
    assert reg.nonconverged.sum() == 0 and reg.dev_error.notna().all()
    with pytest.raises(InnError, match=r"^training\.jacobian_weight: -1\.0 is less than the minimum of 0$"):
        dataclasses.replace(cfg, jacobian_weight=-1.0)


def test_training_afresh_over_a_finished_run_sets_it_aside(tmp_path, pos_dir, capsys):
    """A new run in a finished run's folder moves the old model and history aside, so an
    interrupted new run never leaves its history beside the old model; evaluation refuses a
    history of another run."""
    from inn.experiment.cli import main

    out = tmp_path / "run"
    train("pos", pos_dir, "gru", out, _cfg(max_epochs=2), {"hidden_size": 8}, device="cpu")
    old = (out / "checkpoint.pt").read_bytes()
    train("pos", pos_dir, "gru", out, _cfg(max_epochs=3), {"hidden_size": 8}, device="cpu", stop_after=1, retrain=True)
    assert not (out / "checkpoint.pt").exists() and len(pd.read_csv(out / "history.tsv", sep="\t")) == 1
    [aside] = out.glob("checkpoint.pt.replaced-*")
    assert aside.read_bytes() == old and len(list(out.glob("history.tsv.replaced-*"))) == 1
    (out / "checkpoint.pt").write_bytes(old)  # the old model beside the new, unfinished history
    assert main(evaluate_argv(out / "checkpoint.pt", pos_dir, tmp_path / "eval", "--history", out / "history.tsv")) == 2
    assert "history.tsv has 1 epoch(s) but" in capsys.readouterr().err
    assert not (tmp_path / "eval" / "metrics.json").exists()


def test_a_run_on_the_first_sentences_treats_the_rest_as_unseen(tmp_path, pos_dir):
    """With max_train the vocabularies still cover the whole split: the rows of words (and
    affixes) that the trained sentences never use are the unknown entry's, and unseen-word
    accuracy counts a word as seen only if the trained sentences hold it."""
    from inn.batches import load_features, read_split

    train("pos", pos_dir, "gru", tmp_path, _cfg(max_epochs=2), {"hidden_size": 8}, device="cpu")
    saved = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    features = load_features(pos_dir)
    trained = {w.lower() for s in read_split(pos_dir, "train")[:40] for w, _ in s}
    seen = {features.words.lookup(w) for w in trained}
    weight = saved["state_dict"]["encoder.words.weight"]
    never = [i for i in range(2, len(features.words)) if i not in seen]
    assert never and all(torch.equal(weight[i], weight[1]) for i in never)
    assert not any(torch.equal(weight[i], weight[1]) for i in seen - {1})
    assert set(saved["data"]["vocabularies"]["word_counts"]) == trained
    metrics, _ = evaluate_checkpoint(tmp_path / "checkpoint.pt", pos_dir, "test", device="cpu")
    test_words = [w.lower() for s in read_split(pos_dir, "test") for w, _ in s]
    assert metrics["unseen_tokens"] == sum(w not in trained for w in test_words)


def test_training_turns_a_slow_adjoint_to_gmres_and_says_so(tmp_path, walk_dir, caplog, monkeypatch):
    """The default adjoint (``auto``) stays Anderson on easy systems; where it averages past the
    mark, the rest of the run's adjoints are GMRES's: the history counts their batches, and the
    log says when the switch came."""
    import inn.nn.implicit_function as implicit_function

    cfg = _cfg(max_epochs=2, max_train=None, max_dev=None)  # 60 training walks: 3 batches an epoch
    options = {"hidden_size": 6, "solver": "anderson", "solver_options": {"tol": 1e-4}}
    with caplog.at_level("INFO", logger="inn"):
        history = train("walks", walk_dir, "inn", tmp_path / "easy", cfg, options, device="cpu")
    assert (history.backward_iters < implicit_function.GMRES_PAYS_FROM).all()  # tiny systems
    assert history.backward_gmres.tolist() == [0, 0]
    assert not [r for r in caplog.records if "GMRES from here on" in r.getMessage()]

    monkeypatch.setattr(implicit_function, "GMRES_PAYS_FROM", 0)  # every adjoint counts as slow
    monkeypatch.setattr(implicit_function, "AUTO_WINDOW", 2)
    caplog.clear()
    with caplog.at_level("INFO", logger="inn"):
        history = train("walks", walk_dir, "inn", tmp_path / "slow", cfg, options, device="cpu")
    assert history.backward_gmres.tolist() == [1, 3]
    assert len([r for r in caplog.records if "GMRES from here on" in r.getMessage()]) == 1
