"""Inputs taken at their word: every bad one of the trial below stops with one line that names
the cause and the fix, where it used to give a silently different corpus, a traceback, or a
line naming the wrong cause.

- a tag with whitespace at its start or end (``NN `` beside ``NN``), in a ``word<TAB>tag`` file
  or a CoNLL-U tag column, is refused by file and line, not read as a tag class of its own;
- ``inn tag --out`` naming a folder; a folder where NLTK's ``treebank.zip`` goes;
- a corpus prepared again from other files, found by ``inn train`` resuming: named as other
  data, not as "a different configuration"; a damaged ``features.json`` at evaluation: named
  as damaged, not as other data;
- UTF-16 and UTF-32 text, named as such (not advised to convert from latin-1);
- a ``config.yaml`` that is not YAML, named by file, line and column;
- Snakemake stopped by SIGTERM, which ends saying a job failed where none did;
- positional arguments after an option (``inn tag MODEL --accuracy FILE``).
"""

from __future__ import annotations

import gzip
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import (
    REPO,
    TINY_CONLLU,
    TINY_FEATURES,
    TINY_TEXT,
    evaluate_argv,
    one_line,
    prepare_argv,
    tiny_corpus,
    train_argv,
)

import inn.data.corpora as corpora
import inn.experiment.config as config
from inn.data.corpora import read_conllu, read_tagged, read_treebank_sample
from inn.data.documents import read_text
from inn.data.download import fetch_ewt, fetch_treebank
from inn.data.fingerprint import data_fingerprint
from inn.errors import InnError
from inn.experiment.cli import main as cli
from inn.experiment.prepare import prepare_pos


@pytest.fixture(scope="module")
def model(gru_run) -> Path:
    """The POS checkpoint of ``gru_run``."""
    return gru_run / "checkpoint.pt"


# --------------------------------------------------------------------------- B4, B5: tags with spaces


@pytest.mark.parametrize("tag", ["NN ", " NN", "NN\u00a0"])
def test_tsv_tag_with_whitespace_at_an_end_is_refused(tmp_path, tag):
    path = tmp_path / "t.tsv"
    path.write_text(f"a\tDT\ncat\t{tag}\n\n", encoding="utf-8")
    with pytest.raises(InnError) as error:
        read_tagged(path)
    assert str(error.value) == (
        f"{path}:2: tag {tag!r} has whitespace at its start or end: remove it (as it is, "
        "it would be a tag class of its own)"
    )


def test_tsv_words_crlf_and_byte_order_mark_are_kept(tmp_path):
    """A space inside a word is the corpus's own and kept (one at an end is refused:
    tests/test_inputs_outputs.py)."""
    path = tmp_path / "t.tsv"
    path.write_bytes("\ufeffNew York\tNNP\r\ncat\tNN\r\n\r\n".encode("utf-8"))
    assert read_tagged(path) == [[("New York", "NNP"), ("cat", "NN")]]


def test_prepare_refuses_a_tsv_tag_with_a_trailing_space(tmp_path, capsys):
    files = tiny_corpus(tmp_path / "raw")
    files["dev"].write_text("The\tDT\ncat\tNN \n\n")
    assert cli(prepare_argv(files, tmp_path / "out", "mine")) == 2
    assert one_line(capsys) == (
        f"error: {files['dev']}:2: tag 'NN ' has whitespace at its start or end: remove "
        "it (as it is, it would be a tag class of its own)"
    )
    assert not (tmp_path / "out" / "features.json").exists()


@pytest.mark.parametrize(
    "column, upos, xpos, what, tag",
    [
        ("xpos", "NOUN", "NN ", "XPOS", "NN "),
        ("upos", " NOUN", "NN", "UPOS", " NOUN"),
    ],
)
def test_conllu_tag_with_whitespace_at_an_end_is_refused(tmp_path, column, upos, xpos, what, tag):
    path = tmp_path / "a.conllu"
    path.write_text(TINY_CONLLU.replace("NOUN\tNN", f"{upos}\t{xpos}"), encoding="utf-8")
    with pytest.raises(InnError) as error:
        read_conllu(path, column)
    assert str(error.value) == (
        f"{path}:2: {what} {tag!r} has whitespace at its start or end: remove it (as it "
        "is, it would be a tag class of its own)"
    )


def test_conllu_tag_with_a_space_inside_is_malformed(tmp_path):
    path = tmp_path / "a.conllu"
    path.write_text(TINY_CONLLU.replace("\tNN\t", "\tN N\t"), encoding="utf-8")
    with pytest.raises(InnError) as error:
        read_conllu(path)
    assert str(error.value) == (
        f"{path}:2: malformed CoNLL-U line: XPOS 'N N' holds whitespace, which CoNLL-U "
        "allows only in FORM, LEMMA and MISC: remove it"
    )


def test_conllu_crlf_and_byte_order_mark_are_kept(tmp_path):
    path = tmp_path / "a.conllu"
    path.write_bytes(("\ufeff" + TINY_CONLLU.replace("\n", "\r\n")).encode("utf-8"))
    assert read_conllu(path) == [[("The", "DT"), ("cat", "NN"), ("sat", "VBD"), (".", ".")]]
    assert read_text(path.read_bytes(), str(path))[0][0].column("xpos") == ["DT", "NN", "VBD", "."]


def test_tag_accuracy_refuses_a_gold_tag_with_a_trailing_space(tmp_path, model, capsys):
    gold = tmp_path / "gold.conllu"
    gold.write_text(TINY_CONLLU.replace("\tNN\t", "\tNN \t"), encoding="utf-8")
    assert cli(["tag", str(model), str(gold), "--accuracy", "--out", str(tmp_path / "o.conllu")]) == 2
    assert one_line(capsys) == (
        f"error: {gold}:2: XPOS 'NN ' has whitespace at its start or end: remove it (as "
        "it is, it would be a tag class of its own)"
    )


# --------------------------------------------------------------------------- P2, P5: folders where files go


def test_tag_out_naming_a_folder_is_one_line(tmp_path, model, capsys):
    text = tmp_path / "in.txt"
    text.write_text("The cat sat .\n")
    (tmp_path / "out").mkdir()
    assert cli(["tag", str(model), str(text), "--out", str(tmp_path / "out")]) == 2
    assert one_line(capsys) == (
        f"error: --out {tmp_path}/out is a folder: give a file path, e.g. {tmp_path}/out/tagged.conllu"
    )


def test_a_folder_where_treebank_zip_goes_is_named(tmp_path):
    archive = tmp_path / "corpora" / "treebank.zip"
    (archive / "treebank").mkdir(parents=True)
    with pytest.raises(InnError) as error:
        read_treebank_sample(tmp_path)
    assert str(error.value) == (
        f"{archive} is a folder where NLTK's treebank sample archive goes: move it aside "
        f"(or delete it) and run `inn download-treebank --out-dir {tmp_path.resolve()}`"
    )
    with pytest.raises(InnError) as error:  # before any download is tried
        fetch_treebank(tmp_path)
    assert str(error.value) == (
        f"{archive} is a folder where the file treebank.zip goes: move it aside (or delete it), then rerun the download"
    )
    (tmp_path / "ewt" / "en_ewt-ud-train.conllu").mkdir(parents=True)
    with pytest.raises(InnError, match=r"ewt/en_ewt-ud-train\.conllu is a folder where the file "):
        fetch_ewt("r2.15", tmp_path / "ewt")


# --------------------------------------------------------------------------- P6, P7, P8': the real cause


def test_resuming_on_data_prepared_again_names_the_data_not_the_settings(tmp_path, capsys):
    """P6: the corpus prepared again from other files has other vocabulary sizes, and so other
    model settings; the message names the data, the cause.

    P7, the workflow: its train rule runs this same command (``inn train ... --out-dir``), whose
    resume check is what stops, so the command line covers the workflow's path too; a
    workflow-level run would add only Snakemake's minutes."""
    data, run = tmp_path / "data", tmp_path / "run"
    prepare_pos("tsv", tiny_corpus(tmp_path / "a"), data, "mine", **TINY_FEATURES)
    args = train_argv(
        "pos",
        data,
        "gru",
        run,
        "--device",
        "cpu",
        "--settings",
        '{"model": {"hidden_size": 3}, "training": {"max_epochs": 2}}',
    )
    assert cli(args + ["--stop-after", "1"]) == 0
    capsys.readouterr()
    other = TINY_TEXT.replace("cat", "bird").replace("dog", "fish") + "Birds\tNNS\nfly\tVBP\n.\t.\n\n"
    prepare_pos("tsv", tiny_corpus(tmp_path / "b", other), data, "mine", **TINY_FEATURES)
    assert cli(args) == 2
    line = one_line(capsys)
    assert line.startswith(f"error: {run}/last.pt was trained on other data (fingerprint ")
    assert line.endswith(
        f"(fingerprint {data_fingerprint(data)}; it was prepared again from other files): delete "
        f"{run}/last.pt to train afresh on the new data, or restore the old data to resume"
    )


@pytest.mark.parametrize("content", ['{"sizes": {"max_words": 5', ""])
def test_evaluating_on_a_damaged_features_json_says_damaged(tmp_path, pos_dir, model, capsys, content):
    data = tmp_path / "data"
    data.mkdir()
    for path in pos_dir.iterdir():
        (data / path.name).write_bytes(path.read_bytes())
    (data / "features.json").write_text(content)
    assert cli(evaluate_argv(model, data, tmp_path / "e")) == 2
    line = one_line(capsys)
    assert line.startswith(f"error: damaged feature vocabularies {data}/features.json (")
    assert line.endswith("): delete it and prepare the corpus again (the data stage rewrites it)")


def test_evaluating_on_an_edited_split_says_it_changed(tmp_path, pos_dir, model, capsys):
    data = tmp_path / "data"
    data.mkdir()
    for path in pos_dir.iterdir():
        (data / path.name).write_bytes(path.read_bytes())
    recorded = data_fingerprint(data)
    with open(data / "dev.tsv", "a", encoding="utf-8") as handle:
        handle.write("One\tCD\n\n")
    assert cli(evaluate_argv(model, data, tmp_path / "e")) == 2
    assert one_line(capsys) == (
        f"error: {data} changed since the data stage prepared it (fingerprint {data_fingerprint(data)}, "
        f"{data}/prepared.json records {recorded}): a split or features.json was edited or damaged; prepare the "
        "data again"
    )


# --------------------------------------------------------------------------- P10, P11: UTF-16 and UTF-32


@pytest.mark.parametrize(
    "encoding, bom, named",
    [
        ("utf-16-le", True, "UTF-16LE"),
        ("utf-16-le", False, "UTF-16LE"),
        ("utf-16-be", True, "UTF-16BE"),
        ("utf-16-be", False, "UTF-16BE"),
        ("utf-32-le", True, "UTF-32LE"),
        ("utf-32-be", False, "UTF-32BE"),
    ],
)
def test_wide_unicode_is_named_with_its_conversion(tmp_path, encoding, bom, named):
    data = (("\ufeff" if bom else "") + TINY_TEXT.replace("cat", "café")).encode(encoding)
    assert corpora.wide_encoding(data) == named
    order = "little" if named.endswith("LE") else "big"
    line = f"{named[:6]} text ({order}-endian), not UTF-8: convert it to UTF-8 first (iconv -f {named} -t UTF-8)"
    path = tmp_path / "t.tsv"
    path.write_bytes(data)
    with pytest.raises(InnError) as error:
        read_tagged(path)
    assert str(error.value) == f"{path}: {line}"
    path.write_bytes(gzip.compress(data))
    with pytest.raises(InnError) as error:
        read_conllu(path)
    assert str(error.value) == f"{path} (decompressed): {line}"
    with pytest.raises(InnError) as error:
        read_text(data, "in.conllu")
    assert str(error.value) == f"in.conllu: {line}"


def test_utf8_and_latin1_are_not_taken_for_wide_text(tmp_path):
    assert corpora.wide_encoding(("\ufeff" + TINY_TEXT).encode("utf-8")) is None
    assert corpora.wide_encoding("Ελληνικά\tNN\n".encode()) is None
    assert corpora.wide_encoding("café\tNN\n".encode("latin-1")) is None
    path = tmp_path / "l.tsv"
    path.write_bytes("café\tNN\n".encode("latin-1"))
    with pytest.raises(InnError, match=r"is not UTF-8: convert the file to UTF-8 \(e\.g\. iconv -f latin1 -t utf-8\)$"):
        read_tagged(path)


def test_tag_names_utf16_input(tmp_path, model, capsys):
    text = tmp_path / "in.txt"
    text.write_bytes("The cat sat .\n".encode("utf-16"))
    assert cli(["tag", str(model), str(text), "--out", str(tmp_path / "o.conllu")]) == 2
    assert one_line(capsys) == (
        f"error: {text}: UTF-16 text (little-endian), not UTF-8: convert it to UTF-8 first (iconv -f UTF-16LE -t UTF-8)"
    )


# --------------------------------------------------------------------------- P13: config.yaml that is not YAML


@pytest.mark.parametrize(
    "text, line",
    [
        (
            "walks:\n  b: [1.0, 0.5\n  dim: 4\n",
            ":3:6: not valid YAML: expected ',' or ']', but got ':' (while parsing "
            "a flow sequence begun on line 2); correct the file there",
        ),
        (
            "walks:\n\tdim: 4\n",
            ":2:1: not valid YAML: found character '\\t' that cannot start any token; indent with spaces, not tabs",
        ),
    ],
)
def test_yaml_that_is_not_yaml_is_named_by_file_and_line(tmp_path, text, line):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(InnError) as error:
        config.read_yaml(path)
    assert str(error.value) == f"{path}{line}"


def _snakemake(workdir: Path, *args: str, **popen) -> subprocess.Popen:
    command = [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(REPO / "Snakefile"),
        "--directory",
        str(workdir),
        "--cores",
        "1",
        *args,
    ]
    return subprocess.Popen(
        command,
        cwd=workdir,
        env={**os.environ, "PYTHONPATH": str(REPO / "src")},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **popen,
    )


def test_workflow_names_the_line_of_a_broken_config_yaml(tmp_path):
    """The project's config.yaml, beside the Snakefile (``configfile:``), in a checkout of links
    to this one; a --configfile Snakemake's command line reads before any of the workflow runs,
    in its own words."""
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    for item in REPO.iterdir():
        if item.name != "config.yaml":
            (checkout / item.name).symlink_to(item)
    (checkout / "config.yaml").write_text("walks:\n  b: [1.0, 0.5\n  dim: 4\n")
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(checkout / "Snakefile"), "--cores", "1", "-n"]
    result = subprocess.run(
        command,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO / "src")},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: {checkout}/config.yaml:3:6: not valid YAML: expected ',' or ']', but got ':' (while parsing a flow "
        "sequence begun on line 2); correct the file there"
    )


# --------------------------------------------------------------------------- P14: Snakemake stopped by SIGTERM


@pytest.mark.workflow
def test_snakemake_stopped_by_sigterm_says_no_job_failed(tmp_path, tiny_config):
    """Snakemake alone is sent SIGTERM while a job runs: it lets the job finish and ends saying
    "At least one job did not complete successfully"; the workflow's line says what happened."""
    tiny_config["models"]["pos"]["run"] = []
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(tiny_config))
    run = _snakemake(tmp_path, "summarize_data")
    lines = []
    for line in run.stdout:  # the first job has started
        lines.append(line)
        if line.lstrip().startswith(("rule ", "localrule ")):
            break
    time.sleep(1)
    run.send_signal(signal.SIGTERM)
    out, _ = run.communicate(timeout=600)
    out = "".join(lines) + out
    assert run.returncode != 0 and "Error in rule" not in out
    assert (
        "error: Snakemake was stopped by a signal (SIGTERM) and let its running jobs finish; no job failed, "
        "whatever the next lines say: rerun the same command to run the jobs still to do"
    ) in out.splitlines()


# --------------------------------------------------------------------------- P15: positionals after options


def test_tag_takes_files_after_options(tmp_path, model, capsys):
    gold = tmp_path / "gold.conllu"
    gold.write_text(TINY_CONLLU, encoding="utf-8")
    out = tmp_path / "o.conllu"
    assert cli(["tag", str(model), "--accuracy", str(gold), "--out", str(out)]) == 0
    assert "unrecognized arguments" not in capsys.readouterr().err
    assert len(out.read_text().strip().splitlines()) == 4


def test_concat_tables_takes_inputs_around_options(tmp_path):
    for name, value in (("a.tsv", 1), ("b.tsv", 2)):
        (tmp_path / name).write_text(f"x\n{value}\n")
    assert (
        cli(["concat-tables", str(tmp_path / "a.tsv"), "--out", str(tmp_path / "o.tsv"), str(tmp_path / "b.tsv")]) == 0
    )
    assert (tmp_path / "o.tsv").read_text().split() == ["x", "1", "2"]
