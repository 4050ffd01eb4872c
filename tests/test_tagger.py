"""Tagging new text (issue #27): ``inn tag``, tagger files, :class:`inn.tagger.Tagger`.

Tiny models (a few hundred EWT sentences, 1 epoch, tiny sizes) so that each test takes seconds;
the EWT test file itself is tagged, since ``--accuracy`` must equal ``inn evaluate``'s on it.
"""

from __future__ import annotations

import io
import json
import logging
import sys

import pandas as pd
import pytest
import torch
from conftest import conllu_source, evaluate_argv, export_argv, first_sentences

from inn.checkpoints import read_checkpoint
from inn.experiment.cli import main
from inn.experiment.prepare import prepare_pos
from inn.experiment.train import TrainConfig, train
from inn.tagger import Tagger

TINY_FEATURES = dict(max_words=2000, max_affixes=200, word_dim=8, affix_dim=2)
INN_FAST = {
    "hidden_size": 8,
    "solver": "newton_krylov",
    "solver_options": {"tol": 1e-4, "max_iter": 20, "krylov_max_iter": 20},
}
CFG = TrainConfig(max_train=300, max_dev=50, max_epochs=1)

GUM_LIKE = """\
# newdoc id = GUM_made_up
# sent_id = GUM_made_up-1
# text = I don't know.
1\tI\tI\tPRON\t_\tCase=Nom\t3\tnsubj\t3:nsubj\t_
2-3\tdon't\t_\t_\t_\t_\t_\t_\t_\t_
2\tdo\tdo\tAUX\t_\t_\t4\taux\t4:aux\t_
3\tn't\tnot\tPART\t_\t_\t4\tadvmod\t4:advmod\t_
4\tknow\tknow\tVERB\t_\t_\t0\troot\t0:root\tSpaceAfter=No
5\t.\t.\tPUNCT\t_\t_\t4\tpunct\t4:punct\t_

# sent_id = GUM_made_up-2
# text = Kim went and Lee too.
1\tKim\tKim\tPROPN\t_\t_\t2\tnsubj\t2:nsubj\t_
2\twent\tgo\tVERB\t_\t_\t0\troot\t0:root\t_
3\tand\tand\tCCONJ\t_\t_\t4\tcc\t4:cc\t_
4\tLee\tLee\tPROPN\t_\t_\t2\tconj\t2.1:nsubj\t_
4.1\twent\tgo\tVERB\t_\t_\t_\t_\t2:conj\tCopyOf=2
5\ttoo\ttoo\tADV\t_\t_\t4\tadvmod\t4:advmod\tSpaceAfter=No
6\t.\t.\tPUNCT\t_\t_\t2\tpunct\t2:punct\t_

"""

FRENCH_LIKE = """\
# sent_id = fr-made-up-1
# text = Je parle du chat au voisin.
1\tJe\til\tPRON\t_\t_\t2\tnsubj\t_\t_
2\tparle\tparler\tVERB\t_\t_\t0\troot\t_\t_
3-4\tdu\t_\t_\t_\t_\t_\t_\t_\t_
3\tde\tde\tADP\t_\t_\t5\tcase\t_\t_
4\tle\tle\tDET\t_\t_\t5\tdet\t_\t_
5\tchat\tchat\tNOUN\t_\t_\t2\tobl\t_\t_
6-7\tau\t_\t_\t_\t_\t_\t_\t_\t_
6\tà\tà\tADP\t_\t_\t8\tcase\t_\t_
7\tle\tle\tDET\t_\t_\t8\tdet\t_\t_
8\tvoisin\tvoisin\tNOUN\t_\t_\t2\tobl\t_\tSpaceAfter=No
9\t.\t.\tPUNCT\t_\t_\t2\tpunct\t_\t_

"""

#: a block of comments alone between sentences (a document break some converters write)
COMMENTS_ALONE = "# newdoc id = made-up-2\n# global.columns = ID FORM LEMMA UPOS XPOS FEATS HEAD DEPREL DEPS MISC\n\n"


@pytest.fixture(scope="module")
def ewt_small(tmp_path_factory, ewt_dir):
    """EWT with a 400-sentence train split and its real dev and test files."""
    root = tmp_path_factory.mktemp("tagger")
    train_file = root / "train.conllu"
    train_file.write_text(first_sentences(ewt_dir / "en_ewt-ud-train.conllu", 400), encoding="utf-8")
    out = root / "data" / "ewt"
    source = conllu_source(train_file, ewt_dir / "en_ewt-ud-dev.conllu", ewt_dir / "en_ewt-ud-test.conllu")
    prepare_pos("conllu", source, out, "ewt", **TINY_FEATURES)
    return out


@pytest.fixture(scope="module")
def models(tmp_path_factory, ewt_small):
    """Checkpoints of a tiny INN, a tiny BiLSTM and the perceptron, and their evaluations."""
    root = tmp_path_factory.mktemp("models")
    meta = {"dataset": "ewt", "seed": 1, "scale": "test"}
    train("pos", ewt_small, "inn", root / "inn", CFG, INN_FAST, device="cpu", meta=meta)
    train("pos", ewt_small, "bilstm", root / "bilstm", CFG, {"hidden_size": 8}, device="cpu", meta=meta)
    assert (
        main(
            [
                "train-perceptron",
                "--data",
                str(ewt_small),
                "--out-dir",
                str(root / "perceptron"),
                "--max-train",
                "300",
                "--iterations",
                "1",
                "--scale",
                "test",
            ]
        )
        == 0
    )
    for name in ("inn", "bilstm", "perceptron"):
        assert main(evaluate_argv(root / name / "checkpoint.pt", ewt_small, root / name / "eval")) == 0
    return root


def _tag(argv, capsys, stdin: bytes | None = None, monkeypatch=None):
    """Run ``inn tag``; returns (status, stdout, stderr)."""
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8"))
    status = main(["tag", *map(str, argv)])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _without(line: str, column: int) -> list[str]:
    fields = line.split("\t")
    return fields[:column] + fields[column + 1 :] if len(fields) == 10 else fields


# --------------------------------------------------------------------------- the EWT test file


@pytest.mark.parametrize("name", ["inn", "perceptron"])
def test_ewt_test_file_tagged_line_for_line_with_evaluates_tags_and_accuracy(
    tmp_path, models, ewt_dir, name, capsys, caplog
):
    gold = (ewt_dir / "en_ewt-ud-test.conllu").read_text(encoding="utf-8")
    blank = tmp_path / "blank.conllu"
    blank.write_text(
        "".join(
            "\t".join(f[:4] + ["_"] + f[5:]) + "\n" if len(f := line.split("\t")) == 10 else line + "\n"
            for line in gold.splitlines()
        ),
        encoding="utf-8",
    )
    model = models / name / "checkpoint.pt"
    status, out, err = _tag([model, blank], capsys)
    assert status == 0 and err == ""
    lines, gold_lines = out.splitlines(), gold.splitlines()
    assert len(lines) == len(gold_lines)
    assert [_without(a, 4) for a in lines] == [_without(b, 4) for b in gold_lines]  # all but XPOS, unchanged
    # the tags are evaluate's, token for token
    words = [f for line in lines if len(f := line.split("\t")) == 10 and f[0].isdigit()]
    predictions = pd.read_csv(models / name / "eval" / "predictions.tsv", sep="\t", keep_default_na=False)
    assert [f[1] for f in words] == predictions.word.tolist()
    assert [f[4] for f in words] == predictions.predicted.tolist()
    # and so is the accuracy on the gold file
    with caplog.at_level(logging.INFO, logger="inn.tagging.commands"):
        status, _, _ = _tag(
            [
                model,
                ewt_dir / "en_ewt-ud-test.conllu",
                "--accuracy",
                "--metrics",
                tmp_path / "m.json",
                "--out",
                tmp_path / "tagged.conllu",
            ],
            capsys,
        )
    assert status == 0
    evaluated = json.loads((models / name / "eval" / "metrics.json").read_text())
    scored = json.loads((tmp_path / "m.json").read_text())
    assert scored["accuracy"] == evaluated["accuracy"] and scored["unseen_accuracy"] == evaluated["unseen_accuracy"]
    assert scored["tokens"] == evaluated["tokens"] == 25094
    messages = [r.getMessage() for r in caplog.records]
    assert (
        f"accuracy {evaluated['accuracy']:.4f}% on 25094 tokens, unseen-word accuracy "
        f"{evaluated['unseen_accuracy']:.4f}% on {evaluated['unseen_tokens']} tokens" in messages
    )
    (speed,) = [m for m in messages if m.startswith("tagged ")]
    assert speed.startswith("tagged 2077 sentences, 25094 words in ") and "words/s) on cpu" in speed
    assert speed.endswith("non-converged solve(s)")


def test_benchmark_tagger_row_per_model_with_evaluates_accuracy(tmp_path, models, ewt_dir):
    """The benchmark tags as ``inn tag`` does: on the test file, evaluation's accuracy."""
    out = tmp_path / "speed.tsv"
    names = ("inn", "bilstm", "perceptron")
    assert (
        main(
            [
                "benchmark-tagger",
                *(str(models / n / "checkpoint.pt") for n in names),
                "--text",
                str(ewt_dir / "en_ewt-ud-test.conllu"),
                "--repeats",
                "2",
                "--threads",
                "1",
                "--device",
                "cpu",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    rows = pd.read_csv(out, sep="\t")
    assert rows.model.tolist() == list(names)
    assert (rows.tokens == 25094).all() and (rows.sentences == 2077).all() and (rows.repeats == 2).all()
    assert (rows.tokens_per_second > 0).all() and (rows.seconds_min <= rows.seconds_median).all()
    assert (rows.nonconverged == 0).all() and (rows.threads == 1).all()
    for name, accuracy in zip(names, rows.accuracy):
        evaluated = json.loads((models / name / "eval" / "metrics.json").read_text())
        assert accuracy == pytest.approx(evaluated["accuracy"], abs=5e-4)  # the TSV keeps 6 digits


# --------------------------------------------------------------------------- every line kept, three forms


@pytest.mark.parametrize(
    "text",
    [GUM_LIKE, FRENCH_LIKE, GUM_LIKE + COMMENTS_ALONE + FRENCH_LIKE],
    ids=["gum_like", "french_like", "comments_alone"],
)
def test_multiword_ranges_empty_nodes_and_comments_survive(tmp_path, models, text, capsys):
    path = tmp_path / "in.conllu"
    path.write_text(text, encoding="utf-8")
    status, out, _ = _tag([models / "bilstm" / "checkpoint.pt", path], capsys)
    assert status == 0
    for a, b in zip(out.splitlines(), text.splitlines(), strict=True):
        fields = b.split("\t")
        if len(fields) == 10 and fields[0].isdigit():
            assert _without(a, 4) == _without(b, 4) and a.split("\t")[4] != "_"  # XPOS filled
        else:
            assert a == b  # comments, ranges, empty nodes, blank lines
    # --column upos fills UPOS instead, the XPOS column stays as it was
    status, out, _ = _tag([models / "bilstm" / "checkpoint.pt", path, "--column", "upos"], capsys)
    words = [f for line in out.splitlines() if len(f := line.split("\t")) == 10 and f[0].isdigit()]
    assert all(f[4] == "_" and f[3] != "_" for f in words)
    assert [_without(a, 3) for a in out.splitlines()] == [_without(b, 3) for b in text.splitlines()]


def test_horizontal_and_vertical_input_give_the_conllu_tags(tmp_path, models, capsys, monkeypatch):
    conllu = tmp_path / "in.conllu"
    conllu.write_text(GUM_LIKE + FRENCH_LIKE, encoding="utf-8")
    model = models / "inn" / "checkpoint.pt"
    _, out, _ = _tag([model, conllu, "--output", "horizontal"], capsys)
    from_conllu = out
    sentences = [[pair.rsplit("_", 1)[0] for pair in line.split()] for line in out.splitlines()]
    assert sentences[0] == ["I", "do", "n't", "know", "."]  # the syntactic words, not the range
    horizontal = "\n".join(" ".join(words) for words in sentences) + "\n"
    status, out, _ = _tag([model, "--output", "horizontal"], capsys, horizontal.encode(), monkeypatch)
    assert status == 0 and out == from_conllu  # detected as horizontal from stdin
    vertical = "".join("".join(f"{w}\n" for w in words) + "\n" for words in sentences)
    (tmp_path / "v.txt").write_text(vertical, encoding="utf-8")
    status, out, _ = _tag([model, tmp_path / "v.txt", "--input", "vertical", "--output", "vertical"], capsys)
    assert status == 0
    assert out == "".join(
        "".join(f"{p.rsplit('_', 1)[0]}\t{p.rsplit('_', 1)[1]}\n" for p in line.split()) + "\n"
        for line in from_conllu.splitlines()
    )
    # CoNLL-U output from plain input: one ten-column line per word, the tag in XPOS
    _, out, _ = _tag([model, tmp_path / "v.txt", "--input", "vertical"], capsys)
    first = out.split("\n\n")[0].splitlines()
    assert [line.split("\t")[:2] for line in first] == [[str(i), w] for i, w in enumerate(sentences[0], start=1)]
    assert all(len(line.split("\t")) == 10 for line in first)


def test_library_tagger_equals_the_command(tmp_path, models, capsys, monkeypatch):
    for name in ("inn", "perceptron"):
        path = models / name / "checkpoint.pt"
        tagger = Tagger.load(path, device="cpu")
        sentences = [["The", "cat", "sleeps", "."], ["I", "do", "n't", "know", "."], []]
        tags = tagger.tag(sentences)
        assert [len(t) for t in tags] == [4, 5, 0] and all(t in tagger.tags for s in tags for t in s)
        (tmp_path / "h.txt").write_text("The cat sleeps .\nI do n't know .\n", encoding="utf-8")
        _, out, _ = _tag([path, tmp_path / "h.txt", "--output", "horizontal"], capsys)
        assert out == "".join(" ".join(f"{w}_{t}" for w, t in zip(s, ts)) + "\n" for s, ts in zip(sentences, tags) if s)
        conllu = tagger.tag_conllu(GUM_LIKE)
        _, out, _ = _tag([path, "-"], capsys, GUM_LIKE.encode(), monkeypatch)
        assert conllu == out
        assert tagger.column == "xpos" and tagger.meta["dataset"] == "ewt" and tagger.nonconverged == 0


# --------------------------------------------------------------------------- the tagger file


def test_exported_tagger_file_is_self_contained_and_safe(tmp_path, models, ewt_small, capsys):
    alone = tmp_path / "alone"
    alone.mkdir()
    run = models / "inn"
    assert (
        main(export_argv(run / "checkpoint.pt", alone / "tagger.pt", "--metrics", run / "eval" / "metrics.json")) == 0
    )
    payload = torch.load(alone / "tagger.pt", weights_only=True)  # plain data: loading cannot run code
    evaluated = json.loads((run / "eval" / "metrics.json").read_text())
    assert payload["meta"]["test"]["accuracy"] == evaluated["accuracy"]
    assert (
        payload["meta"]["dev"]["accuracy"] > 0 and payload["meta"]["seed"] == 1 and payload["meta"]["scale"] == "test"
    )
    assert payload["data"]["column"] == "xpos" and payload["data"]["corpus"] == "ewt"
    assert payload["inn_version"] == "0.1.0" and payload["format"] == 2
    assert not {"optimizer", "train_state", "settings"} & set(payload)
    (alone / "in.txt").write_text("The cat sleeps .\n", encoding="utf-8")
    status, out, _ = _tag([alone / "tagger.pt", alone / "in.txt", "--output", "horizontal"], capsys)
    assert (
        status == 0
        and out
        == " ".join(
            f"{w}_{t}"
            for w, t in zip(
                ["The", "cat", "sleeps", "."],
                Tagger.load(run / "checkpoint.pt", "cpu").tag([["The", "cat", "sleeps", "."]])[0],
            )
        )
        + "\n"
    )


def test_a_checkpoint_from_before_tagger_files_converts_with_its_features(
    tmp_path, models, ewt_small, capsys, monkeypatch
):
    old = tmp_path / "old.pt"
    payload = read_checkpoint(models / "bilstm" / "checkpoint.pt")
    torch.save({k: v for k, v in payload.items() if k not in ("data", "inn_version")} | {"format": 1}, old)
    status, _, err = _tag([old, "-"], capsys, b"The cat\n", monkeypatch)
    assert status == 2
    assert err == (
        f"error: {old} holds no feature vocabularies (written by inn before tagger files, format 1): "
        f"convert it with `inn export-tagger --checkpoint {old} --data results/data/pos/<corpus> "
        "--out tagger.pt`\n"
    )
    assert main(export_argv(old, tmp_path / "new.pt", "--data", ewt_small)) == 0
    sentences = [["The", "cat", "sleeps", "."]]
    assert Tagger.load(tmp_path / "new.pt", "cpu").tag(sentences) == Tagger.load(
        models / "bilstm" / "checkpoint.pt", "cpu"
    ).tag(sentences)


# --------------------------------------------------------------------------- bad input, one line each


def test_bad_input_is_one_line_and_writes_nothing(tmp_path, models, capsys, monkeypatch):
    model = models / "bilstm" / "checkpoint.pt"
    out = tmp_path / "out.conllu"
    good = tmp_path / "good.conllu"
    good.write_text(GUM_LIKE, encoding="utf-8")
    bad = tmp_path / "bad.conllu"
    bad.write_text(GUM_LIKE.replace("3\tn't\tnot", "3\tn't not"), encoding="utf-8")
    status, stdout, err = _tag([model, good, bad, "--out", out], capsys)
    assert (status, stdout) == (2, "") and not out.exists()
    assert err == f"error: {bad}:7: malformed CoNLL-U line: expected 10 tab-separated fields, found 9\n"
    bad.write_text(GUM_LIKE.replace("4\tknow", "four\tknow"), encoding="utf-8")
    assert _tag([model, bad], capsys)[2] == (
        f"error: {bad}:8: malformed CoNLL-U line: ID 'four' is not a word "
        "index (3), a multiword range (3-4) or an empty node (3.1)\n"
    )
    latin = tmp_path / "latin1.conllu"
    latin.write_bytes(FRENCH_LIKE.encode("latin-1"))
    status, _, err = _tag([model, good, latin, "--out", out], capsys)
    offset = FRENCH_LIKE.encode("latin-1").index("à".encode("latin-1"))
    assert status == 2 and not out.exists()
    assert err.startswith(f"error: {latin}: not UTF-8 text (byte offset {offset}: ") and err.count("\n") == 1
    merged = tmp_path / "merged.conllu"  # the blank line between two sentences lost
    merged.write_text(GUM_LIKE.rstrip("\n") + "\n" + GUM_LIKE, encoding="utf-8")
    line = [i for i, text in enumerate(merged.read_text().split("\n"), start=1) if text.startswith("1\tI\t")][1]
    assert _tag([model, merged], capsys)[2].startswith(f"error: {merged}:{line}: token ID 1 after token ")
    hashtags = tmp_path / "tweets.txt"  # plain text whose first line starts like a comment
    hashtags.write_text("#winning at tagging\nThe cat sleeps\n", encoding="utf-8")
    auto = _tag([model, hashtags, "--output", "horizontal"], capsys)
    assert auto == _tag([model, hashtags, "--input", "horizontal", "--output", "horizontal"], capsys)
    assert auto[1].count("\n") == 2 and auto[1].startswith("#winning_")
    hashtags.write_text("# text = The\n1\tThe" + "\t_" * 8 + "\nThe cat sleeps\n", encoding="utf-8")
    assert _tag([model, hashtags], capsys)[2] == (
        f"error: {hashtags}:3: malformed CoNLL-U line: expected 10 tab-separated fields, found 1\n"
    )
    # word<TAB>tag lines are not sentences of words: refused unless --input says which form
    vertical = tmp_path / "tagged.txt"
    vertical.write_text("The\tDT\ncat\tNN\n\nIt\tPRP\n", encoding="utf-8")
    assert _tag([model, vertical], capsys)[2] == (
        f"error: {vertical}:1: tab-separated fields, but not a CoNLL-U token line (10 fields starting with an ID): "
        "give --input vertical for word<TAB>... lines, --input conllu to have a CoNLL-U file checked line by line, "
        "or --input horizontal for tabs as spaces\n"
    )
    status, stdout, _ = _tag([model, vertical, "--input", "vertical", "--output", "vertical"], capsys)
    assert status == 0 and [line.split("\t")[0] for line in stdout.split("\n") if line] == ["The", "cat", "It"]
    # a .conllu file is read as CoNLL-U even when its first token line is malformed
    bad.write_text(GUM_LIKE.replace("1\tI\tI", "1\tI I"), encoding="utf-8")
    assert "malformed CoNLL-U line: expected 10 tab-separated fields, found 9" in _tag([model, bad], capsys)[2]
    # no gold tags for --accuracy: the line of the first word without one
    status, _, err = _tag([model, good, "--accuracy"], capsys)
    assert (status, err) == (
        2,
        f"error: {good}:4: no gold XPOS tag to score against (--accuracy needs the gold tags in the XPOS column)\n",
    )
    # empty input: empty output, exit 0
    status, stdout, err = _tag([model, "--out", out], capsys, b"", monkeypatch)
    assert (status, err) == (0, "") and out.read_text() == ""


def test_plain_text_keeps_its_lines_and_refuses_lone_carriage_returns(tmp_path, models, capsys, caplog):
    """Horizontal output lines up with horizontal input, blank lines included; old Mac line
    ends would merge sentences and are refused; filling another column than the model's warns."""
    model = models / "inn" / "checkpoint.pt"
    text = tmp_path / "in.txt"
    text.write_text("The cat sleeps .\n\n   \nA dog barks .\n", encoding="utf-8")
    status, out, _ = _tag([model, text, "--input", "horizontal", "--output", "horizontal"], capsys)
    lines = out.split("\n")
    assert status == 0 and out.count("\n") == 4 and lines[1:3] == ["", ""]
    assert [p.rsplit("_", 1)[0] for p in lines[3].split()] == ["A", "dog", "barks", "."]
    status, out, _ = _tag([model, text, "--input", "horizontal"], capsys)  # CoNLL-U: two sentences, no empty ones
    assert status == 0 and out.count("\n\n") == 2 and not out.startswith("\n")
    text.write_bytes(b"The cat sleeps .\rA dog barks .\r")
    assert _tag([model, text], capsys)[2] == (
        f"error: {text}:1: a carriage return inside the line: end lines with \\n or \\r\\n "
        "(e.g. tr '\\r' '\\n' < in > out)\n"
    )
    text.write_text("The cat sleeps .\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="inn.tagging.commands"):
        assert _tag([model, text, "--column", "upos"], capsys)[0] == 0
    assert "the model predicts XPOS tags but --column upos fills UPOS with them" in caplog.text


def test_export_takes_only_this_models_test_scores(tmp_path, models, capsys):
    run = models / "inn"
    evaluated = json.loads((run / "eval" / "metrics.json").read_text())
    for wrong, message in (
        ({"model": "bilstm"}, "scores model bilstm, but"),
        ({"seed": 7}, "scores seed 7, but"),
        ({"split": "dev"}, "scores the dev split, or part of it"),
    ):
        (tmp_path / "m.json").write_text(json.dumps({**evaluated, **wrong}))
        assert main(export_argv(run / "checkpoint.pt", tmp_path / "t.pt", "--metrics", tmp_path / "m.json")) == 2
        assert message in capsys.readouterr().err and not (tmp_path / "t.pt").exists()


def test_a_file_that_is_not_a_tagger_is_one_line(tmp_path, models, capsys):
    walks = tmp_path / "walks.pt"
    payload = read_checkpoint(models / "bilstm" / "checkpoint.pt")
    torch.save({**payload, "meta": {**payload["meta"], "task": "walks"}}, walks)
    text = tmp_path / "in.txt"
    text.write_text("The cat\n", encoding="utf-8")
    cases = {
        walks: f"error: {walks} is a walks model, not a tagger: only POS models tag text\n",
        tmp_path / "weights.pt": f"error: {tmp_path / 'weights.pt'} is not an inn model file (no model in it): "
        "give a checkpoint.pt or a tagger file\n",
        tmp_path / "code.pt": f"error: {tmp_path / 'code.pt'} is refused: loading it would run Python code "
        "(pandas._libs.tslibs.timestamps._unpickle_timestamp), and inn reads model, state and "
        "data files only as data; give a model file inn wrote (checkpoint.pt or tagger.pt)\n",
        tmp_path / "newer.pt": f"error: {tmp_path / 'newer.pt'} was written by inn 9.0 in model file format 9, which "
        "inn 0.1.0 cannot read (formats 1, 2): use the inn version that wrote it, or upgrade inn\n",
    }
    torch.save({"weights": torch.zeros(3)}, tmp_path / "weights.pt")
    torch.save({"format": 2, "perceptron": {}, "hook": pd.Timestamp(0)}, tmp_path / "code.pt")
    torch.save({**payload, "format": 9, "inn_version": "9.0"}, tmp_path / "newer.pt")
    for path, message in cases.items():
        status, stdout, err = _tag([path, text], capsys)
        assert (status, stdout, err) == (2, "", message)


def test_out_to_a_pipe_writes_into_it_and_leaves_it_a_pipe(tmp_path, models, capsys):
    """``--out /dev/null`` (the benchmark) or a named pipe is written as it is: an atomic write
    would replace the device or pipe with a regular file."""
    import os
    import stat
    import threading

    from inn.errors import InnError
    from inn.io import atomic_open

    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    received = []
    reader = threading.Thread(target=lambda: received.append(pipe.read_text(encoding="utf-8")))
    reader.start()
    (tmp_path / "in.txt").write_text("The cat sleeps .\n", encoding="utf-8")
    status, _, _ = _tag(
        [models / "bilstm" / "checkpoint.pt", tmp_path / "in.txt", "--output", "horizontal", "--out", pipe], capsys
    )
    reader.join(timeout=30)
    assert status == 0 and received[0].startswith("The_") and stat.S_ISFIFO(os.stat(pipe).st_mode)
    with pytest.raises(InnError, match=f"cannot write {pipe} atomically: it is not a regular file"):
        with atomic_open(pipe) as handle:
            handle.write("x")
    assert stat.S_ISFIFO(os.stat(pipe).st_mode)
