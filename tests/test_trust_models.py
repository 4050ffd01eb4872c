"""What inn trusts: configs and user modules are code, everything it reads back is data.

Models, resume states, tagger files and walk files are read with ``torch.load(weights_only=True)``:
a file crafted to run code when unpickled is refused with one line at every place that reads
one, and the code never runs (each crafted file would create a marker file). A test score stays
bound to the weights it scored (``weights_sha256``), and files that are not what they are given
as say what they are instead. Tiny walks and EWT slices: seconds each.
"""

from __future__ import annotations

import json
import logging
import pathlib
import pickle
import re
import zipfile
from pathlib import Path

import pytest
import torch
from conftest import REPO, evaluate_argv, export_argv, first_sentences, one_line, tiny_walks

from inn.checkpoints import read_checkpoint
from inn.data.walk import generate_walks, load_walks, save_walks
from inn.errors import InnError
from inn.experiment.cli import main as cli
from inn.experiment.prepare import prepare_pos
from inn.experiment.train import TrainConfig, train

MODEL = "bilstm-h4"
REFUSED = (
    "is refused: loading it would run Python code (getattr), and inn reads model, state and data files only as data"
)


class _Touch:
    """Unpickled, it creates ``marker``: what a crafted file could do instead (run any code)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return pathlib.Path.touch, (pathlib.Path(self.marker),)


def _craft(path: Path, marker: Path, **plain) -> Path:
    """A torch file (zip, as ``torch.save`` writes) that runs code when unpickled."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"format": 2, **plain, "hook": _Touch(marker)}, path)
    return path


def _cfg(**kw) -> TrainConfig:
    return TrainConfig(**{**dict(max_epochs=2, patience=5, lr=0.5), **kw})


@pytest.fixture(scope="module")
def walk_dir(tmp_path_factory) -> Path:
    return tiny_walks(tmp_path_factory.mktemp("walks") / "b1.0", (40, 10, 10), max_len=10, settings=True)


def test_the_crafted_file_runs_code_when_unpickled(tmp_path):
    """The test files are live: unpickled the ordinary way, they create their marker."""
    marker = tmp_path / "ran"
    with zipfile.ZipFile(_craft(tmp_path / "x.pt", marker)) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith("data.pkl")]
        pickle.loads(archive.read(name))
    assert marker.exists()


# --------------------------------------------------------------------------- B1, B2, P4: states a run reads


def test_b1_a_crafted_last_pt_stops_the_run_and_runs_nothing(tmp_path, walk_dir):
    out, marker = tmp_path / "run", tmp_path / "ran"
    last = _craft(out / "last.pt", marker, settings={}, optimizer={}, train_state={})
    crafted = last.read_bytes()
    with pytest.raises(InnError) as caught:
        train("walks", walk_dir, MODEL, out, _cfg(), device="cpu")
    assert str(caught.value) == (
        f"{last} {REFUSED}; it is not a resume state inn wrote: remove it, then rerun to train afresh"
    )
    assert not marker.exists()
    assert last.read_bytes() == crafted and not list(out.glob("last.pt.damaged-*"))  # not set aside as damaged
    assert not (out / "checkpoint.pt").exists()


def test_b1_a_sound_last_pt_resumes_as_data(tmp_path, walk_dir):
    """What the trainer writes loads with weights_only=True: the run resumes, nothing set aside."""
    out = tmp_path / "run"
    first = train("walks", walk_dir, MODEL, out, _cfg(), device="cpu", stop_after=1)
    resumed = train("walks", walk_dir, MODEL, out, _cfg(), device="cpu")
    assert resumed.seconds.iloc[0] == first.seconds.iloc[0]  # epoch 1 from last.pt, not trained again
    assert not list(out.glob("*.damaged-*"))


def test_b2_a_crafted_best_pt_stops_the_end_of_a_resumed_run(tmp_path, walk_dir):
    out, marker = tmp_path / "run", tmp_path / "ran"
    train("walks", walk_dir, MODEL, out, _cfg(), device="cpu", stop_after=1)
    best = _craft(out / "best.pt", marker, meta={}, state_dict={})
    with pytest.raises(InnError) as caught:
        train("walks", walk_dir, MODEL, out, _cfg(max_epochs=1), device="cpu")
    assert str(caught.value) == (
        f"{best} {REFUSED}; it is not a state inn wrote: remove {out / 'last.pt'} and "
        f"{best}, then rerun to train {out} afresh"
    )
    assert not marker.exists() and not (out / "checkpoint.pt").exists()


def test_p4_a_damaged_best_pt_at_the_end_of_a_resumed_run_is_one_line(tmp_path, walk_dir):
    out = tmp_path / "run"
    train("walks", walk_dir, MODEL, out, _cfg(), device="cpu", stop_after=1)
    best = out / "best.pt"
    best.write_bytes(best.read_bytes()[:300])
    with pytest.raises(InnError) as caught:
        train("walks", walk_dir, MODEL, out, _cfg(max_epochs=1), device="cpu")
    assert str(caught.value) == (
        f"cannot finish {out}: {best} is damaged (truncated or damaged: PytorchStreamReader failed reading "
        f"zip archive: failed finding central directory); remove {out / 'last.pt'} and {best}, then rerun to "
        f"train {out} afresh"
    )


# --------------------------------------------------------------------------- the other read sites


@pytest.fixture(scope="module")
def walk_model(tmp_path_factory, walk_dir) -> Path:
    out = tmp_path_factory.mktemp("walk_model")
    train("walks", walk_dir, MODEL, out, _cfg(max_epochs=1), device="cpu")
    return out / "checkpoint.pt"


def test_read_checkpoint_refuses_a_crafted_model(tmp_path, walk_dir, capsys):
    marker = tmp_path / "ran"
    model = _craft(tmp_path / "model.pt", marker, model_config={}, state_dict={})
    with pytest.raises(InnError, match=re.escape(f"{model} {REFUSED}; give a model file inn wrote")):
        read_checkpoint(model)
    assert cli(evaluate_argv(model, walk_dir, tmp_path)) == 2
    assert one_line(capsys) == f"error: {model} {REFUSED}; give a model file inn wrote (checkpoint.pt or tagger.pt)"
    assert not marker.exists()


def test_benchmark_checkpoint_refuses_a_crafted_file(tmp_path, walk_dir, walk_model, capsys):
    marker = tmp_path / "ran"
    model = _craft(tmp_path / "layer.pt", marker, state_dict={})
    common = ["--hidden", "4", "--lengths", "3", "--repeats", "1", "--out", str(tmp_path / "b.tsv")]
    assert cli(["benchmark", "--checkpoint", str(model), *common]) == 2
    assert one_line(capsys) == (
        f"error: {model} {REFUSED}; give a checkpoint.pt of a trained implicit model, or "
        "a state_dict of an implicit layer"
    )
    assert cli(["benchmark", "--checkpoint", str(model), "--data", str(walk_dir), *common]) == 2
    assert one_line(capsys).startswith(f"error: {model} {REFUSED}; give a model file inn wrote")
    assert not marker.exists() and not (tmp_path / "b.tsv").exists()


def test_walk_files_refuse_a_crafted_file(tmp_path, capsys):
    marker = tmp_path / "ran"
    walks = _craft(tmp_path / "walks" / "dev.pt", marker, x=torch.zeros(1, 1, 1))
    with pytest.raises(InnError, match=re.escape(f"{walks} {REFUSED}; give a file written by `inn generate-walks`")):
        load_walks(walks)
    assert (
        cli(["walk-floor", str(walks), "--out", str(tmp_path / "f.tsv"), "--predictions", str(tmp_path / "p.tsv")]) == 2
    )
    assert one_line(capsys).startswith(f"error: {walks} {REFUSED}")
    assert not marker.exists()


def test_inn_runs_and_kept_states_refuse_crafted_states(tmp_path, walk_dir, caplog):
    """``inn runs`` lists a run whose last.pt would run code from its history alone, and
    ``--keep-states`` keeps nothing of a run whose best.pt would."""
    from inn.experiment.runs import list_runs, save_states

    results, marker = tmp_path / "results", tmp_path / "ran"
    run = results / "train" / "walks" / "b1.0" / MODEL / "seed1"
    train("walks", walk_dir, MODEL, run, _cfg(), device="cpu", stop_after=1)
    sound = (run / "last.pt").read_bytes()
    _craft(run / "last.pt", marker, settings={})
    with caplog.at_level(logging.WARNING):
        list_runs([results])
    assert f"{run / 'last.pt'} {REFUSED}; listed from its history alone" in caplog.text
    (run / "last.pt").write_bytes(sound)
    best = _craft(run / "best.pt", marker, meta={})
    with pytest.raises(InnError, match=re.escape(f"{best} cannot be read as a state; nothing of it is kept in")):
        save_states([results], tmp_path / "kept")
    assert not marker.exists()


def _torch_load_calls(text: str) -> list[str]:
    """Every call of torch's load in ``text``, its arguments to the closing parenthesis."""
    calls, name = [], "torch." + "load("
    for start in [m.start() for m in re.finditer(re.escape(name), text)]:
        depth, end = 0, start + len(name) - 1
        for end in range(start + len(name) - 1, len(text)):
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            if depth == 0:
                break
        calls.append(text[start : end + 1])
    return calls


def test_nothing_is_unpickled_anywhere():
    """No ``torch.load`` in the package or its tests reads without ``weights_only=True``."""
    unsafe = [
        f"{path.relative_to(REPO)}: {' '.join(call.split())}"
        for folder in ("src", "tests")
        for path in sorted((REPO / folder).rglob("*.py"))
        for call in _torch_load_calls(path.read_text(encoding="utf-8"))
        if "weights_only=True" not in call
    ]
    assert unsafe == []
    found = [
        path
        for folder in ("src", "tests")
        for path in (REPO / folder).rglob("*.py")
        if "weights_only=" + "False" in path.read_text(encoding="utf-8")
    ]
    assert found == []


#: resume states of paper-scale runs archived in the repository's history (format 2, inn 0.1.0)
ARCHIVED = {
    "87fb7a7": "docs/benchmark/paper_walks_6ebf96e/unfinished/walks/b0.5/inn/seed1/last.pt",
    "b7ac551": "docs/benchmark/paper_walks_6ebf96e/unfinished/walks/b0.25/inn/seed1/last.pt",
}


def test_archived_states_and_fixtures_load_as_data(tmp_path):
    """What inn wrote before reads as data: the test fixtures, and archived resume states where
    the checkout's history holds them (a shallow clone may not)."""
    import subprocess

    for path in sorted((REPO / "tests" / "fixtures").glob("*.pt")):
        assert isinstance(torch.load(path, weights_only=True), dict)
    for commit, name in ARCHIVED.items():
        shown = subprocess.run(["git", "-C", str(REPO), "show", f"{commit}:{name}"], capture_output=True)
        if shown.returncode:
            continue
        (tmp_path / "last.pt").write_bytes(shown.stdout)
        state = torch.load(tmp_path / "last.pt", weights_only=True)
        assert state["format"] == 2 and state["train_state"]["epoch"] > 0


# --------------------------------------------------------------------------- P8, P9: what a file is not


def test_p8_random_bytes_are_not_a_torch_file(tmp_path, capsys):
    """Not "holds Python objects": bytes torch never wrote, whatever their first bytes."""
    path = tmp_path / "random.bin"
    for head in (b"", b"\x80", b"PK"):
        path.write_bytes(head + bytes(range(256)) * 4)
        with pytest.raises(
            InnError,
            match=re.escape(
                f"cannot read checkpoint {path} (not a torch file): give a model "
                "file inn wrote (checkpoint.pt or tagger.pt)"
            ),
        ):
            read_checkpoint(path)
    assert cli(["tag", str(path), str(tmp_path / "in.txt")]) == 2
    assert one_line(capsys).startswith(f"error: cannot read checkpoint {path} (not a torch file)")


def test_p9_a_folder_given_as_a_model_says_it_is_a_folder(tmp_path, walk_model, capsys):
    folder = walk_model.parent
    assert cli(["tag", str(folder), str(tmp_path / "in.txt")]) == 2
    assert one_line(capsys) == (
        f"error: {folder} is a folder, not a model file: give the file inside it (it holds "
        f"checkpoint.pt), e.g. {folder / 'checkpoint.pt'} or {folder / 'tagger.pt'}"
    )


def test_p9_a_misspelled_model_path_names_close_names(tmp_path, walk_model, walk_dir):
    folder = walk_model.parent
    with pytest.raises(
        InnError, match=re.escape(f"model file not found: {folder / 'checkpont.pt'} (did you mean {walk_model}?)") + "$"
    ):
        read_checkpoint(folder / "checkpont.pt")
    with pytest.raises(
        InnError, match=re.escape(f"model file not found: {folder / 'zzz.pt'} (nothing of a close name in {folder})")
    ):
        read_checkpoint(folder / "zzz.pt")
    with pytest.raises(
        InnError,
        match=re.escape(f"model file not found: {tmp_path / 'no' / 'x.pt'} (there is no folder {tmp_path / 'no'})"),
    ):
        read_checkpoint(tmp_path / "no" / "x.pt")
    expected = tmp_path / "results" / "train" / "pos" / "ewt" / "inn" / "seed1" / "checkpoint.pt"
    with pytest.raises(InnError, match=re.escape(f"checkpoint not found: {expected} (train the model first)")):
        read_checkpoint(expected)


# --------------------------------------------------------------------------- P16: b from the walk files


def test_p16_benchmark_reads_b_from_the_walk_files(tmp_path, walk_dir):
    from inn.experiment.timing import walk_bias

    renamed = tmp_path / "my walks"
    renamed.mkdir()
    for split in ("train", "dev", "test"):
        (renamed / f"{split}.pt").write_bytes((walk_dir / f"{split}.pt").read_bytes())
    assert walk_bias(renamed) == 1.0
    (renamed / "prepared.json").write_text(json.dumps({"b": 0.25}))
    assert walk_bias(renamed) == 0.25  # what the data stage recorded
    bare = tmp_path / "bare"
    save_walks(bare / "dev.pt", generate_walks(4, b=1.0, dim=3, seed=1))
    with pytest.raises(InnError, match=re.escape(f"{bare} records no walk bias b")):
        walk_bias(bare)


def test_p16_inn_benchmark_data_on_a_folder_of_any_name(tmp_path, walk_dir):
    out = tmp_path / "run"
    renamed = tmp_path / "walks-v2"
    renamed.mkdir()
    for split in ("train", "dev", "test"):
        (renamed / f"{split}.pt").write_bytes((walk_dir / f"{split}.pt").read_bytes())
    train("walks", renamed, "inn", out, _cfg(max_epochs=1), {"hidden_size": 3, "solver": "anderson"}, device="cpu")
    assert (
        cli(
            [
                "benchmark",
                "--checkpoint",
                str(out / "checkpoint.pt"),
                "--data",
                str(renamed),
                "--hidden",
                "3",
                "--lengths",
                "3",
                "--repeats",
                "1",
                "--methods",
                "anderson",
                "--batch-size",
                "2",
                "--harder",
                "--baselines",
                "--peers",
                "--out",
                str(tmp_path / "b.tsv"),
            ]
        )
        == 0
    )
    assert "checkpoint" in (tmp_path / "b.tsv").read_text()


# --------------------------------------------------------------------------- B3, P3: taggers and their scores


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory, ewt_dir) -> Path:
    """Two runs of one model, seed and data that differ in hidden size (4 and 8), evaluated."""
    root = tmp_path_factory.mktemp("two_runs")
    source = {"tags": "xpos"}
    for split, count in (("train", 60), ("dev", 20), ("test", 20)):
        (root / f"{split}.conllu").write_text(
            first_sentences(ewt_dir / f"en_ewt-ud-{split}.conllu", count), encoding="utf-8"
        )
        source[split] = str(root / f"{split}.conllu")
    data = root / "data" / "ewt"
    prepare_pos("conllu", source, data, "ewt", max_words=500, max_affixes=50, word_dim=4, affix_dim=1)
    for hidden in (4, 8):
        run = root / f"h{hidden}"
        train(
            "pos",
            data,
            "gru",
            run,
            TrainConfig(max_epochs=1),
            {"hidden_size": hidden},
            device="cpu",
            meta={"dataset": "ewt", "seed": 1, "scale": "test"},
        )
        assert cli(evaluate_argv(run / "checkpoint.pt", data, run / "eval")) == 0
    return root


def test_b3_evaluate_names_the_weights_it_scored(two_runs):
    from inn.checkpoints import weights_digest

    for hidden in (4, 8):
        run = two_runs / f"h{hidden}"
        metrics = json.loads((run / "eval" / "metrics.json").read_text())
        assert metrics["weights_sha256"] == weights_digest(read_checkpoint(run / "checkpoint.pt"))
    digests = {json.loads((two_runs / f"h{h}" / "eval" / "metrics.json").read_text())["weights_sha256"] for h in (4, 8)}
    assert len(digests) == 2 and all(re.fullmatch("[0-9a-f]{64}", d) for d in digests)


def test_b3_export_tagger_refuses_the_metrics_of_other_weights(tmp_path, two_runs, capsys):
    ckpt, other = two_runs / "h4" / "checkpoint.pt", two_runs / "h8" / "eval" / "metrics.json"
    assert cli(export_argv(ckpt, tmp_path / "t.pt", "--metrics", other)) == 2
    line = one_line(capsys)
    assert line.startswith(f"error: {other} scores other weights (sha256 ") and f"than {ckpt} holds (" in line
    assert line.endswith("give the metrics.json that inn evaluate wrote for this model")
    assert not (tmp_path / "t.pt").exists()


def test_b3_the_tagger_keeps_the_digest_and_inn_tag_logs_it(tmp_path, two_runs, capsys, caplog):
    run = two_runs / "h4"
    tagger = tmp_path / "tagger.pt"
    assert cli(export_argv(run / "checkpoint.pt", tagger, "--metrics", run / "eval" / "metrics.json")) == 0
    digest = json.loads((run / "eval" / "metrics.json").read_text())["weights_sha256"]
    assert torch.load(tagger, weights_only=True)["meta"]["test"]["weights_sha256"] == digest
    (tmp_path / "in.txt").write_text("The cat sleeps .\n", encoding="utf-8")
    with caplog.at_level(logging.INFO, logger="inn"):
        assert cli(["tag", str(tagger), str(tmp_path / "in.txt")]) == 0
    assert f"weights sha256 {digest}" in caplog.text


def test_b3_archived_metrics_without_a_digest_are_accepted_with_a_warning(tmp_path, two_runs, caplog):
    run = two_runs / "h4"
    metrics = json.loads((run / "eval" / "metrics.json").read_text())
    del metrics["weights_sha256"]
    archived = tmp_path / "metrics.json"
    archived.write_text(json.dumps(metrics))
    with caplog.at_level(logging.WARNING):
        assert cli(export_argv(run / "checkpoint.pt", tmp_path / "t.pt", "--metrics", archived)) == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == [
        f"{archived} was written before metrics named the weights they score: cannot check that it "
        f"scores {run / 'checkpoint.pt'}"
    ]


def test_p3_a_tag_list_shorter_than_the_output_layer_is_one_line(tmp_path, two_runs, capsys):
    payload = read_checkpoint(two_runs / "h4" / "checkpoint.pt")
    vocabularies = payload["data"]["vocabularies"]
    short = tmp_path / "short.pt"
    tags = vocabularies["tags"]
    torch.save({**payload, "data": {**payload["data"], "vocabularies": {**vocabularies, "tags": tags[:-2]}}}, short)
    (tmp_path / "in.txt").write_text("The cat sleeps .\n", encoding="utf-8")
    assert cli(["tag", str(short), str(tmp_path / "in.txt")]) == 2
    assert one_line(capsys) == (
        f"error: {short}: its vocabularies do not fit its model ({len(tags) - 2} tags for "
        f"an output layer of {len(tags)}): the file is damaged or was edited; export it "
        "again from its checkpoint with `inn export-tagger`"
    )
