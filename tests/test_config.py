"""Config schema: defaults fill in, and every kind of mistake names its key in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from inn.errors import InnError
from inn.experiment.config import check_inputs, pos_corpora, timed_pos_corpus, timed_walk_b, validate_config

REPO = Path(__file__).resolve().parents[1]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"


def test_empty_config_gets_the_papers_defaults():
    config = validate_config({}, SCHEMA)
    assert config["features"] == {"max_words": 39_000, "max_affixes": 2_000, "word_dim": 320, "affix_dim": 20}
    assert config["walks"]["b"] == [2.0, 1.0, 0.75, 0.5, 0.25]
    assert config["walks"]["sizes"] == {"train": 50_000, "dev": 2_500, "test": 5_000}
    assert config["corpora"]["wsj"]["path"] is None


def test_shipped_config_is_valid_and_equals_the_defaults():
    shipped = yaml.safe_load((REPO / "config.yaml").read_text())
    assert validate_config(shipped, SCHEMA) == validate_config({}, SCHEMA)


def test_the_benchmark_methods_are_read_from_the_benchmarks_table(monkeypatch):
    """The config's benchmark methods are those of inn.experiment.benchmark_layers.METHODS, a
    method added there included, as the model names are the registry's."""
    from inn.experiment.benchmark_layers import METHODS

    monkeypatch.setitem(METHODS, "anderson_mine", ("anderson", {"tol": 1e-6}))
    config = validate_config({"timing": {"benchmark": {"methods": ["anderson_phantom5", "anderson_mine"]}}}, SCHEMA)
    assert config["timing"]["benchmark"]["methods"] == ["anderson_phantom5", "anderson_mine"]
    with pytest.raises(
        InnError, match=r"^config: timing\.benchmark\.methods\.0: 'implicit_lstm' is not one of \['paper'"
    ):
        validate_config({"timing": {"benchmark": {"methods": ["implicit_lstm"]}}}, SCHEMA)


@pytest.mark.parametrize(
    "config, message",
    [
        ({"walks": {"dim": "ten"}}, r"^config: walks\.dim: 'ten' is not of type 'integer'$"),
        ({"walks": {"dim": 0}}, r"^config: walks\.dim: 0 is less than the minimum of 1$"),
        ({"walks": {"b": [0.5, -1]}}, r"^config: walks\.b\.1: -1 is less than or equal to the minimum of 0$"),
        ({"walks": {"b": []}}, r"^config: walks\.b: \[\] should be non-empty$"),
        ({"walks": {"sizes": {"trian": 5}}}, r"^config: walks\.sizes\.trian: unknown key"),
        ({"learning_rate": 0.5}, r"^config: learning_rate: unknown key \(allowed: "),
        ({"corpora": {"wsj": {"path": ""}}}, r"^config: corpora\.wsj\.path: '' should be non-empty$"),
        # a corpus of one's own: its name, format, files and tag column
        ({"corpora": {"my tb": {"format": "tsv"}}}, r"^config: corpora\.my tb: not a usable name \(letters, digits"),
        ({"corpora": {"fr": {"format": "conll"}}}, r"^config: corpora\.fr\.format: 'conll' is not one of \['conllu'"),
        ({"corpora": {"fr": {"train": "a.conllu"}}}, r"^config: corpora\.fr: 'format' is a required property$"),
        (
            {"corpora": {"fr": {"format": "conllu", "tags": "upos", "train": "a", "test": "c"}}},
            r"^config: corpora\.fr: 'dev' is a required property$",
        ),
        (
            {"corpora": {"fr": {"format": "conllu", "train": "a", "dev": "b", "test": "c"}}},
            r"^config: corpora\.fr: 'tags' is a required property$",
        ),
        (
            {"corpora": {"fr": {"format": "conllu", "tags": "lemma", "train": "a", "dev": "b", "test": "c"}}},
            r"^config: corpora\.fr\.tags: 'lemma' is not one of \['xpos', 'upos'\]$",
        ),
        (
            {"corpora": {"fr": {"format": "tsv", "tags": "upos", "train": "a", "dev": "b", "test": "c"}}},
            r"^config: corpora\.fr\.tags: a tsv corpus does not read it \(it reads train, dev, test\)$",
        ),
        (
            {"corpora": {"wsj": {"train": "a"}}},
            r"^config: corpora\.wsj\.train: a ptb corpus does not read it \(it reads path\)$",
        ),
        # settings that name something the run does not have
        (
            {"timing": {"pos_corpus": "wsj"}},
            r"^config: timing\.pos_corpus: 'wsj' is not a corpus this run prepares \(ewt, ptb_sample\); "
            r"name one of them, or null$",
        ),
        (
            {"corpora": {"ewt": {"enabled": False}}, "timing": {"pos_corpus": "ewt"}},
            r"^config: timing\.pos_corpus: 'ewt' is not a corpus this run prepares \(ptb_sample\)",
        ),
        (
            {"models": {"walks": {"b": [0.5, 3.0]}}},
            r"^config: models\.walks\.b\.1: 3 is not one of walks\.b \(2, 1, 0\.75, 0\.5, 0\.25\)$",
        ),
        (
            {"walks": {"b": [2.0, 1.0]}, "timing": {"walk_b": 0.5}},
            r"^config: timing\.walk_b: 0\.5 is not among the walk biases trained \(2, 1\); name one of them, or null$",
        ),
        (
            {"models": {"walks": {"b": [2]}}, "timing": {"walk_b": 1.0}},
            r"^config: timing\.walk_b: 1 is not among the walk biases trained \(2\)",
        ),
        # walk biases whose folders (b{b:g}) would merge or mislabel them (issue 29)
        (
            {"walks": {"b": [0.5, 0.5000001]}},
            r"^config: walks\.b\.1: 0\.5000001 would share the folder b0\.5 with walks\.b\.0 \(0\.5\), and one of them "
            r"would be lost; give b with at most 6 significant digits$",
        ),
        (
            {"walks": {"b": [2.0, 0.3333333]}},
            r"^config: walks\.b\.1: 0\.3333333 would be generated and labelled as 0\.333333 "
            r"\(its folder b0\.333333 keeps 6 significant digits\)",
        ),
        ({"walks": {"b": [0.5, float("inf")]}}, r"^config: walks\.b\.1: inf is not a finite number$"),
        ({"solver": {"tol": float("nan")}}, r"^config: solver\.tol: nan is not a finite number$"),
        # a timed POS corpus with no neural POS model to time
        (
            {"models": {"pos": {"run": []}}, "timing": {"pos_corpus": "ewt"}},
            r"^config: timing\.pos_corpus: 'ewt' is named, but no neural POS model is trained "
            r"\(models\.pos\.run: \[\]\), so none would be timed; set timing\.pos_corpus: null, "
            r"or add a model to models\.pos\.run$",
        ),
        (
            {"models": {"pos": {"run": ["perceptron"]}}, "timing": {"pos_corpus": "ewt"}},
            r"^config: timing\.pos_corpus: 'ewt' is named, but no neural POS model is trained",
        ),
        # taggers with nothing to train them on (config/tagger.yaml without a corpus of one's own)
        (
            {
                "corpora": {"ewt": {"enabled": False}, "ptb_sample": {"enabled": False}},
                "models": {"pos": {"run": ["bilstm"]}},
            },
            r"^config: models\.pos\.run: bilstm would be trained, but no corpus is enabled: "
            r"add one under corpora \(README, \"Your own corpus\"\), or set models\.pos\.run: \[\]$",
        ),
    ],
)
def test_schema_rejections_name_the_key(config, message):
    with pytest.raises(InnError, match=message) as info:
        validate_config(config, SCHEMA)
    assert "\n" not in str(info.value)


def command_line(*entries: str) -> dict:
    """The config Snakemake makes of ``--config`` entries over the shipped defaults: its own
    parser, which reads every value nested in a list or mapping as text."""
    from snakemake.cli import parse_config
    from snakemake.utils import update_config

    config = yaml.safe_load((REPO / "config.yaml").read_text())
    update_config(config, parse_config(list(entries)))
    return config


def test_command_line_settings_get_their_types():
    """The README's ``--config seeds='[1, 2, 3]'`` and its kind: Snakemake gives text, the
    config gets the numbers, booleans and nulls the schema and the solver registry want."""
    config = validate_config(
        command_line(
            "seeds=[1, 2, 3]",
            "models={walks: {b: [0.5, 2]}}",
            "training={walks: {lr: 0.25, warm_start: false}}",
            "corpora={ptb_sample: {nltk_data: null}, wsj: {path: /data/2024}}",
            "solver={options: {backward_tol: 1e-3, backward_fallback: null, cuda_graph: auto}}",
        ),
        SCHEMA,
    )
    assert config["seeds"] == [1, 2, 3]
    assert config["models"]["walks"]["b"] == [0.5, 2]
    assert config["training"]["walks"]["lr"] == 0.25 and config["training"]["walks"]["warm_start"] is False
    assert config["corpora"]["ptb_sample"]["nltk_data"] is None
    assert config["corpora"]["wsj"]["path"] == "/data/2024"  # text where the schema wants text
    assert config["solver"]["options"] == {"backward_tol": 0.001, "backward_fallback": None, "cuda_graph": "auto"}


def test_the_readme_offline_quick_start_points_the_sample_at_a_folder():
    """The README's offline quick start, as a shell reads it: its ``--config`` entry gives the
    NLTK sample the folder named, over the quick preset (a typo in it would be the user's first
    error)."""
    import shlex

    line = next(
        line
        for line in (REPO / "README.md").read_text(encoding="utf-8").splitlines()
        if line.startswith("snakemake ") and "nltk_data:" in line
    )
    words = shlex.split(line)
    assert words[words.index("--configfile") + 1] == "config/quick.yaml"
    config = validate_config(command_line(*words[words.index("--config") + 1 :]), SCHEMA)
    assert config["corpora"]["ptb_sample"]["nltk_data"] == "/path/to/nltk_data"


@pytest.mark.parametrize(
    "entry, message",
    [
        ("seeds=[1, two]", r"^config: seeds\.1: 'two' is not of type 'integer'$"),
        ("walks={dim: .inf}", r"^config: walks\.dim: '\.inf' is not of type 'integer'$"),
        (
            "solver={options: {backward_tol: .inf}}",
            r"^config: solver\.options\.backward_tol must be a number > 0 or null, "
            r"not '\.inf'$",
        ),
    ],
)
def test_command_line_text_that_is_no_value_keeps_its_line(entry, message):
    with pytest.raises(InnError, match=message):
        validate_config(command_line(entry), SCHEMA)


def test_names_and_biases_compare_as_the_run_uses_them():
    """An integer b matches the float in walks.b; a disabled timing stage checks nothing it names."""
    config = validate_config({"models": {"walks": {"b": [2]}}, "timing": {"walk_b": 2}}, SCHEMA)
    assert timed_walk_b(config) == 2.0
    validate_config({"corpora": {"ewt": {"enabled": False}}, "timing": {"enabled": False, "pos_corpus": "ewt"}}, SCHEMA)


def test_which_corpora_a_run_prepares_and_times():
    own = {"format": "conllu", "tags": "upos", "train": "a", "dev": "b", "test": "c"}
    config = validate_config({"corpora": {"fr_gsd": own, "ewt": {"enabled": False}}}, SCHEMA)
    assert pos_corpora(config) == ["fr_gsd", "ptb_sample"]  # config order; WSJ without a path is skipped
    assert timed_pos_corpus(config) == "fr_gsd" and timed_walk_b(config) == 0.5
    config = validate_config(
        {"corpora": {"penn": {"format": "ptb", "path": "/ldc"}}, "walks": {"b": [2.0, 1.0]}}, SCHEMA
    )
    assert timed_pos_corpus(config) == "penn" and timed_walk_b(config) == 2.0  # a WSJ copy by any name


SENTENCE = "# sent_id = 1\n1\tHi\thi\tINTJ\tUH\t_\t0\troot\t_\t_\n\n"


def test_walk_folder_names_are_unchanged():
    from inn.experiment.config import bias_name

    assert [bias_name(b) for b in (2.0, 1, 0.75, 0.5, 0.25, 0.333333)] == [
        "b2",
        "b1",
        "b0.75",
        "b0.5",
        "b0.25",
        "b0.333333",
    ]


def test_inputs_a_corpus_names_must_exist_unless_the_workflow_downloads_them(tmp_path):
    (tmp_path / "data").mkdir()
    for split in ("train", "dev", "test"):
        (tmp_path / "data" / f"{split}.conllu").write_text(SENTENCE)
    own = {"format": "conllu", "tags": "upos", **{s: f"data/{s}.conllu" for s in ("train", "dev", "test")}}
    config = validate_config({"corpora": {"mine": own}}, SCHEMA)
    downloads = ("resources/ud-english-ewt", "resources/nltk_data")
    check_inputs(config, downloads, root=tmp_path)  # EWT and NLTK's sample are fetched by the workflow
    with pytest.raises(
        InnError,
        match=r"^config: corpora\.ewt\.train: resources/ud-english-ewt/en_ewt-ud-train"
        r"\.conllu does not exist \(relative to .+\); correct the path, or set "
        r"corpora\.ewt\.enabled: false$",
    ):
        check_inputs(config, (), root=tmp_path)
    config = validate_config({"corpora": {"mine": {**own, "dev": "data/dev.conllu.gz"}}}, SCHEMA)
    with pytest.raises(InnError, match=r"^config: corpora\.mine\.dev: data/dev\.conllu\.gz does not exist"):
        check_inputs(config, downloads, root=tmp_path)
    config = validate_config(
        {"corpora": {"wsj": {"path": str(tmp_path / "ldc")}, "mine": {**own, "enabled": False}}}, SCHEMA
    )
    with pytest.raises(InnError, match=rf"^config: corpora\.wsj\.path: {tmp_path}/ldc does not exist; correct"):
        check_inputs(config, downloads, root=tmp_path)
    (tmp_path / "ldc").mkdir()
    check_inputs(config, downloads, root=tmp_path)  # the disabled corpus's paths are not read


@pytest.mark.parametrize(
    "fmt, dev, message",
    [
        (
            "tsv",
            "",
            r"^config: corpora\.mine\.dev: data/dev \(relative to .+\) holds no sentences: "
            r"name a file with at least one$",
        ),
        ("tsv", "\n \n\t\n", r"^config: corpora\.mine\.dev: data/dev \(relative to .+\) holds no sentences"),
        ("conllu", "# sent_id = 1\n\n", r"^config: corpora\.mine\.dev: data/dev \(relative to .+\) holds no sentences"),
        (
            "tsv",
            None,
            r"^config: corpora\.mine\.dev: data/dev \(relative to .+\) is a folder, not a tsv file: name the "
            r"file itself$",
        ),
        (
            "tsv",
            b"\xe9t\xe9\tNN\n",
            r"^config: corpora\.mine\.dev: data/dev \(relative to .+\): .+/data/dev:1: byte 0 "
            r"\(0xe9\) is not UTF-8",
        ),
    ],
)
def test_an_empty_or_unreadable_split_is_named_by_its_key_before_any_job(tmp_path, fmt, dev, message):
    data = tmp_path / "data"
    data.mkdir()
    for split in ("train", "test"):
        (data / split).write_text(SENTENCE if fmt == "conllu" else "Hi\tUH\n")
    if dev is None:
        (data / "dev").mkdir()
    elif isinstance(dev, bytes):
        (data / "dev").write_bytes(dev)
    else:
        (data / "dev").write_text(dev)
    corpus = {
        "format": fmt,
        **({"tags": "xpos"} if fmt == "conllu" else {}),
        **{s: f"data/{s}" for s in ("train", "dev", "test")},
    }
    config = validate_config({"corpora": {"mine": corpus}}, SCHEMA)
    with pytest.raises(InnError, match=message):
        check_inputs(config, ("resources/ud-english-ewt", "resources/nltk_data"), root=tmp_path)


def test_an_nltk_data_folder_without_the_treebank_is_named(tmp_path, nltk_data):
    """Not left to the job, which would otherwise read whatever copy NLTK_DATA points at."""
    config = validate_config(
        {"corpora": {"ewt": {"enabled": False}, "ptb_sample": {"nltk_data": str(tmp_path)}}}, SCHEMA
    )
    with pytest.raises(
        InnError,
        match=rf"^config: corpora\.ptb_sample\.nltk_data: {tmp_path} holds no corpora/treebank "
        r"\(NLTK's treebank sample\): run `inn download-treebank --out-dir DIR` and name DIR, or "
        r"null to search NLTK_DATA$",
    ):
        check_inputs(config, root=tmp_path)
    config["corpora"]["ptb_sample"]["nltk_data"] = str(nltk_data)
    check_inputs(config, root=tmp_path)


def test_training_defaults_have_one_home():
    """The schema holds the training defaults: `inn train` takes each task's from it, config.yaml
    spells them out unchanged, and TrainConfig's own defaults (for library callers) are POS's."""
    import argparse
    import dataclasses

    from inn.experiment.config import training_defaults
    from inn.experiment.train import TrainConfig, _settings_from

    written = yaml.safe_load((SCHEMA.parents[2] / "config.yaml").read_text(encoding="utf-8"))["training"]
    for task in ("pos", "walks"):
        assert written[task] == {k: v for k, v in training_defaults(task).items() if k in written[task]}
    library = dataclasses.asdict(TrainConfig())
    assert {k: library[k] for k in training_defaults("pos")} == training_defaults("pos")
    assert training_defaults("walks")["loss"] == "token" != library["loss"]
    # `inn train --task walks` without settings trains as the workflow would: the walks' loss
    args = argparse.Namespace(task="walks", settings=None, settings_file=None, seed=None)
    assert _settings_from(args)[0].loss == "token"


def test_a_partly_given_walks_training_section_keeps_the_walks_defaults():
    """A config giving training.walks in part (config/quick.yaml without config.yaml) must not get
    the POS loss and word dropout of the definition the two sections share."""
    config = validate_config({"training": {"walks": {"max_epochs": 3}}}, SCHEMA)
    assert config["training"]["walks"]["loss"] == "token" and config["training"]["walks"]["word_dropout"] == 0.0
    assert config["training"]["walks"]["max_epochs"] == 3 and config["training"]["pos"]["loss"] == "sentence"
