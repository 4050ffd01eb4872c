# Config validation and the small helpers every stage shares.
import sys
from pathlib import Path

import json
import re
import shlex

# Jobs and this file run this checkout's library, also inside `--sdm conda` environments
# (which hold the dependencies, not the package) and on cluster nodes.
SRC = Path(workflow.basedir) / "src"
sys.path.insert(0, str(SRC))
# (quoted: the checkout's path may hold spaces; braces doubled for Snakemake's formatting). A job that
# declares no threads gets one core from Snakemake: OMP_NUM_THREADS=1 keeps torch and numpy to it
# (their default is every core); jobs that declare threads pass --threads {threads}.
PREFIX = f"export PYTHONPATH={shlex.quote(str(SRC))}".replace("{", "{{").replace("}", "}}")
PREFIX += "${{PYTHONPATH:+:$PYTHONPATH}} OMP_NUM_THREADS=1; "
shell.prefix(PREFIX)

from inn.experiment.config import (
    bias_name,
    check_inputs,
    model_sizes,
    paper_corpora,
    pos_corpora as configured_corpora,
    run_models,
    timed_pos_corpus,
    timed_walk_b,
    validate_config,
)
from inn.errors import InnError
from inn.models import MODELS, base_name, model_with_role, parse_model_name
from inn.registry import TASKS, paper_task, task_spec
from inn.user_modules import ENV as IMPORTS_ENV, environment_value

ENV = "../envs/inn.yaml"
SPLITS = ["train", "dev", "test"]
#: The free corpora's default locations: files missing there are downloaded (data.smk).
EWT_DEFAULT = "resources/ud-english-ewt"
NLTK_DEFAULT = "resources/nltk_data"

try:
    validate_config(config, workflow.source_path("../schemas/config.schema.yaml"))
    check_inputs(config, downloaded=(EWT_DEFAULT, NLTK_DEFAULT))
except InnError as exc:
    # one line, as the README promises (a WorkflowError would add Snakemake's file-and-line block)
    print(f"error: {exc}", file=sys.stderr)
    sys.exit(1)

# The config's own modules (imports: cells and models of one's own), imported above by the
# config check, are imported by every job too: `inn` reads them from INN_IMPORTS.
if config["imports"]:
    imports = environment_value(config["imports"])
    shell.prefix(PREFIX + f"export {IMPORTS_ENV}={shlex.quote(imports)}; ".replace("{", "{{").replace("}", "}}"))


def pos_corpora():
    """The POS corpora this run prepares (inn.experiment.config.pos_corpora): every enabled corpus, a
    Penn Treebank copy only when its path is given."""
    return configured_corpora(config)


def walk_biases():
    """The walk biases b as wildcard strings (2.0 -> "2", 0.25 -> "0.25"; inn.experiment.config.bias_name)."""
    return [bias_name(b)[1:] for b in config["walks"]["b"]]


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
#: the model wildcard of the neural runs: a neural model of the registry, optionally sized (bilstm-h300)
NEURAL_MODEL = "(" + "|".join(name for name, spec in MODELS.items() if spec.cell) + r")(-h\d+)?"


wildcard_constraints:
    task="|".join(TASKS),
    seed=r"\d+",


def training_runs():
    """(task, dataset, model, seed) of every configured run (inn.experiment.config.run_models)."""
    runs = [("pos", dataset, model) for dataset in pos_corpora() for model in run_models(config, "pos")]
    walks = config["models"]["walks"]
    biases = walk_biases() if walks["b"] is None else [bias_name(b)[1:] for b in walks["b"]]
    runs += [("walks", f"b{b}", model) for b in biases for model in run_models(config, "walks")]
    return [(task, dataset, model, seed) for task, dataset, model in runs for seed in config["seeds"]]


def pos_datasets():
    """The POS corpora that models are trained on, in config order (none for a walks-only run)."""
    return list(dict.fromkeys(d for t, d, _, _ in training_runs() if t == paper_task(2)))


def walk_datasets():
    """The walk data sets that models are trained on (each gets its floor in Table 1)."""
    return sorted({d for t, d, _, _ in training_runs() if t == paper_task(1)})


def all_metrics():
    """The metrics.json of every configured run (what `rule all` asks for)."""
    return [f"results/eval/{t}/{d}/{m}/seed{s}/metrics.json" for t, d, m, s in training_runs()]


def all_taggers():
    """The self-contained tagger file of every configured POS run (`rule all` asks for them)."""
    return [f"results/taggers/{t}/{d}/{m}/seed{s}/tagger.pt" for t, d, m, s in training_runs() if task_spec(t).tags]


def data_dir(wildcards):
    return f"results/data/{wildcards.task}/{wildcards.dataset}"


def data_files(splits):
    """Input function: the prepared files of a run's task and dataset for ``splits``."""

    def files(wildcards):
        return task_spec(wildcards.task).data_files(data_dir(wildcards), splits)

    return files


def model_settings(wildcards):
    """The run's settings as the JSON that `inn train --settings` reads."""
    task = wildcards.task
    kind, size = parse_model_name(wildcards.model)
    options, solver = {}, config["solver"]
    if size is None:
        options["hidden_size"] = model_sizes(config, task, kind)[0]  # None: the feature size
    if MODELS[kind].implicit:
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
    forget_max = config["models"][task].get("inn_lstm_forget_max", 1)
    if MODELS[kind].cell == "implicit_lstm" and forget_max != 1:  # absent at 1: earlier runs keep their settings
        options["forget_max"] = forget_max
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
    wanted = {("pos", timed_pos_corpus(config)), ("walks", None if walk_b is None else bias_name(walk_b))}
    return sorted({(t, d) for t, d, _, _ in training_runs() if (t, d) in wanted})


def timed_runs():
    """Every neural model of the timed data sets, first seed (the perceptron has no layer to time)."""
    seed = config["seeds"][0]
    datasets = timed_datasets()
    return sorted(
        {(t, d, m, seed) for t, d, m, _ in training_runs() if (t, d) in datasets and MODELS[base_name(m)].cell}
    )


#: the model whose trained layer the implicit-layer benchmark solves: the paper's INN (its registry role)
BENCHMARKED = model_with_role("claimed")


def benchmarked_runs():
    """The INN runs whose trained weights the implicit-layer benchmark loads."""
    if not config["timing"]["benchmark"]["enabled"]:
        return []
    return [run for run in timed_runs() if run[2] == BENCHMARKED]


def benchmarked_hidden_size(wildcards):
    """The INN's k for a task by its registry rule: configured, or (POS) the input feature size."""
    hidden = model_sizes(config, wildcards.task, BENCHMARKED)[0]
    return hidden or task_spec(wildcards.task).feature_size(config["features"])


def run_files(pattern, runs):
    return [pattern.format(task=t, dataset=d, model=m, seed=s) for t, d, m, s in runs]


def segmenter_input(wildcards):
    """The segmenter a POS run's tagger file holds: one for a CoNLL-U corpus whose train file
    has '# text' lines (or is not there yet to be read), when segmenter.enabled."""
    corpus = config["corpora"].get(wildcards.dataset, {})
    if not config["segmenter"]["enabled"] or corpus.get("format") != "conllu":
        return []
    train = Path(corpus["train"])
    if train.is_file():
        with open(train, encoding="utf-8", errors="replace") as handle:
            if not any(line.startswith("# text") for _, line in zip(range(1000), handle)):
                return []
    return [f"results/segmenters/{wildcards.dataset}/segmenter.pt"]
