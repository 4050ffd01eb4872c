# Config validation and the small helpers every stage shares.
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError

# Jobs and this file run this checkout's library, also inside `--sdm conda` environments
# (which hold the dependencies, not the package) and on cluster nodes.
SRC = Path(workflow.basedir) / "src"
sys.path.insert(0, str(SRC))
shell.prefix(f'export PYTHONPATH="{SRC}${{{{PYTHONPATH:+:$PYTHONPATH}}}}"; ')

from inn.config import validate_config
from inn.errors import InnError

try:
    validate_config(config, workflow.source_path("../schemas/config.schema.yaml"))
except InnError as exc:
    raise WorkflowError(str(exc)) from None

ENV = "../envs/inn.yaml"
SPLITS = ["train", "dev", "test"]
#: How each corpus the config may name is read (inn.data.corpora.READERS).
CORPUS_KINDS = {"ewt": "conllu", "ptb_sample": "nltk_treebank", "wsj": "ptb"}
EWT_DEFAULT = "resources/ud-english-ewt"
NLTK_DEFAULT = "resources/nltk_data"


def pos_corpora():
    """The POS corpora this run prepares: enabled free corpora, and WSJ when a path is given."""
    corpora = config["corpora"]
    names = [name for name in ("ewt", "ptb_sample") if corpora[name]["enabled"]]
    return names + (["wsj"] if corpora["wsj"]["path"] else [])


def walk_biases():
    """The walk biases b as wildcard strings (2.0 -> "2", 0.25 -> "0.25")."""
    return [f"{b:g}" for b in config["walks"]["b"]]


def corpus_source(wildcards):
    """Input files of a corpus: its CoNLL-U files, NLTK's treebank archive, or the LDC root."""
    corpus = config["corpora"][wildcards.corpus]
    if wildcards.corpus == "ewt":
        return [f"{corpus['path']}/en_ewt-ud-{split}.conllu" for split in SPLITS]
    if wildcards.corpus == "ptb_sample":
        nltk_data = corpus["nltk_data"]
        if nltk_data is None:
            return []
        archive = f"{nltk_data}/corpora/treebank.zip"
        return [archive] if nltk_data == NLTK_DEFAULT or Path(archive).exists() else [nltk_data]
    return [corpus["path"]]


def corpus_args(wildcards):
    """The prepare-pos arguments that say where a corpus lives."""
    corpus = config["corpora"][wildcards.corpus]
    if wildcards.corpus == "ptb_sample":
        return f"--nltk-data {corpus['nltk_data']}" if corpus["nltk_data"] else ""
    return f"--path {corpus['path']}"
