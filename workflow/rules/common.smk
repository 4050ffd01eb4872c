# Config validation and the small helpers every stage shares.
import sys
from pathlib import Path

import json
import re
import shlex

from snakemake.exceptions import WorkflowError

# Jobs and this file run this checkout's library, also inside `--sdm conda` environments
# (which hold the dependencies, not the package) and on cluster nodes.
SRC = Path(workflow.basedir) / "src"
sys.path.insert(0, str(SRC))
shell.prefix(f'export PYTHONPATH="{SRC}${{{{PYTHONPATH:+:$PYTHONPATH}}}}"; ')

from inn.experiment.config import check_inputs, pos_corpora as configured_corpora, timed_pos_corpus, timed_walk_b, validate_config
from inn.errors import InnError

ENV = "../envs/inn.yaml"
SPLITS = ["train", "dev", "test"]
#: The free corpora's default locations: files missing there are downloaded (data.smk).
EWT_DEFAULT = "resources/ud-english-ewt"
NLTK_DEFAULT = "resources/nltk_data"

try:
    validate_config(config, workflow.source_path("../schemas/config.schema.yaml"))
    check_inputs(config, downloaded=(EWT_DEFAULT, NLTK_DEFAULT))
except InnError as exc:
    raise WorkflowError(str(exc)) from None


def pos_corpora():
    """The POS corpora this run prepares (inn.experiment.config.pos_corpora): every enabled corpus, a
    Penn Treebank copy only when its path is given."""
    return configured_corpora(config)


def walk_biases():
    """The walk biases b as wildcard strings (2.0 -> "2", 0.25 -> "0.25")."""
    return [f"{b:g}" for b in config["walks"]["b"]]


def corpus_source(wildcards):
    """Input files of a corpus: its split files, NLTK's treebank archive, or the LDC root."""
    corpus = config["corpora"][wildcards.corpus]
    if corpus["format"] in ("conllu", "tsv"):
        return [corpus[split] for split in SPLITS]
    if corpus["format"] == "nltk_treebank":
        nltk_data = corpus["nltk_data"]
        if nltk_data is None:
            return []
        archive = f"{nltk_data}/corpora/treebank.zip"
        return [archive] if nltk_data == NLTK_DEFAULT or Path(archive).exists() else [nltk_data]
    return [corpus["path"]]


def corpus_args(wildcards, input):
    """The prepare-pos arguments that say what a corpus is and where it lives."""
    corpus = config["corpora"][wildcards.corpus]
    args = [f"--format {corpus['format']}"]
    if corpus["format"] in ("conllu", "tsv"):
        args += [f"--{split} {shlex.quote(path)}" for split, path in zip(SPLITS, input)]
    if corpus["format"] == "conllu":
        args.append(f"--tags {corpus['tags']}")
    if corpus["format"] == "ptb":
        args.append(f"--path {shlex.quote(corpus['path'])}")
    if corpus["format"] == "nltk_treebank" and corpus["nltk_data"]:
        args.append(f"--nltk-data {shlex.quote(corpus['nltk_data'])}")
    return " ".join(args)


# --------------------------------------------------------------------------- training runs
RUN = "{task}/{dataset}/{model}/seed{seed}"


wildcard_constraints:
    task="pos|walks",
    seed=r"\d+",


def training_runs():
    """(task, dataset, model, seed) of every configured run."""
    runs = []
    pos, walks = config["models"]["pos"], config["models"]["walks"]
    for dataset in pos_corpora():
        runs += [("pos", dataset, model) for model in pos["run"]]
    biases = walk_biases() if walks["b"] is None else [f"{b:g}" for b in walks["b"]]
    for b in biases:
        runs += [("walks", f"b{b}", model) for model in ("inn", "inn_lstm") if model in walks["run"]]
        if "bilstm" in walks["run"]:
            runs += [("walks", f"b{b}", f"bilstm-h{size}") for size in walks["bilstm_hidden_sizes"]]
    return [(task, dataset, model, seed) for task, dataset, model in runs for seed in config["seeds"]]


def pos_datasets():
    """The POS corpora that models are trained on, in config order (none for a walks-only run)."""
    return list(dict.fromkeys(d for t, d, _, _ in training_runs() if t == "pos"))


def walk_datasets():
    """The walk data sets that models are trained on (each gets its floor in Table 1)."""
    return sorted({d for t, d, _, _ in training_runs() if t == "walks"})


def all_metrics():
    """The metrics.json of every configured run (what `rule all` asks for)."""
    return [f"results/eval/{t}/{d}/{m}/seed{s}/metrics.json" for t, d, m, s in training_runs()]


def all_taggers():
    """The self-contained tagger file of every configured POS run (`rule all` asks for them)."""
    return [f"results/taggers/{t}/{d}/{m}/seed{s}/tagger.pt" for t, d, m, s in training_runs() if t == "pos"]


def data_dir(wildcards):
    return f"results/data/{wildcards.task}/{wildcards.dataset}"


def data_files(splits):
    """Input function: the prepared files of a run's task and dataset for ``splits``."""

    def files(wildcards):
        folder = data_dir(wildcards)
        if wildcards.task == "pos":
            return [f"{folder}/{split}.tsv" for split in splits] + [f"{folder}/features.json"]
        return [f"{folder}/{split}.pt" for split in splits]

    return files


def model_settings(wildcards):
    """The run's settings as the JSON that `inn train --settings` reads."""
    task, model = wildcards.task, wildcards.model
    sizes, solver = config["models"][task], config["solver"]
    options = {}
    if model in ("inn", "inn_lstm"):  # the implicit GRU and LSTM
        lstm_size = sizes["inn_lstm_hidden_size"] if model == "inn_lstm" else None
        options["hidden_size"] = lstm_size or sizes["inn_hidden_size"]
        solver_options = {"tol": solver["tol"], "strict": solver["strict"]}
        if solver["max_iter"] is not None:
            solver_options["max_iter"] = solver["max_iter"]
        if solver["name"] == "newton_krylov":
            solver_options["krylov_max_iter"] = solver["krylov_max_iter"]
        options.update(
            solver=solver["name"],
            trainable_boundary=solver["trainable_boundary"],
            solver_options={**solver_options, **solver["options"]},
        )
    elif task == "pos":
        options["hidden_size"] = sizes["baseline_hidden_size"]
    meta = {"scale": config["scale"], "dataset": wildcards.dataset, "seed": int(wildcards.seed)}
    return json.dumps({"training": config["training"][task], "model": options, "meta": meta})


def gpus(wildcards):
    return 0 if config["device"] == "cpu" else 1


# --------------------------------------------------------------------------- timing and report


def timed_datasets():
    """(task, dataset) whose trained models the timing stage measures."""
    if not config["timing"]["enabled"]:
        return []
    walk_b = timed_walk_b(config)
    wanted = {("pos", timed_pos_corpus(config)), ("walks", None if walk_b is None else f"b{walk_b:g}")}
    return sorted({(t, d) for t, d, _, _ in training_runs() if (t, d) in wanted})


def timed_runs():
    """Every neural model of the timed data sets, first seed (the perceptron has no layer to time)."""
    seed = config["seeds"][0]
    datasets = timed_datasets()
    return sorted({(t, d, m, seed) for t, d, m, _ in training_runs() if (t, d) in datasets and m != "perceptron"})


def benchmarked_runs():
    """The INN runs whose trained weights the implicit-layer benchmark loads."""
    if not config["timing"]["benchmark"]["enabled"]:
        return []
    return [run for run in timed_runs() if run[2] == "inn"]


def inn_hidden_size(wildcards):
    """The INN's k for a task: configured, or (POS) the input feature size as in the paper."""
    size = config["models"][wildcards.task]["inn_hidden_size"]
    features = config["features"]
    return size or features["word_dim"] + 6 * features["affix_dim"] + 8


def run_files(pattern, runs):
    return [pattern.format(task=t, dataset=d, model=m, seed=s) for t, d, m, s in runs]
