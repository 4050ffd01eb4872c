"""What a validated workflow config runs: its models and their sizes, the POS corpora it
prepares, the walk biases it trains, and what its timing stage measures. The workflow's rules
and the report ask these, so that every stage reads the config the same way.
"""

from __future__ import annotations

from collections.abc import Mapping

from inn.models import FEATURES, MODELS


def model_sizes(config: Mapping, task: str, model: str) -> list[int | None]:
    """A model's hidden sizes on ``task`` by its registry rule (:class:`inn.models.ModelSpec`):
    one size, the sizes of a sweep, or ``[None]`` where the rule falls through to the input
    feature size (which ``inn train`` computes from the prepared data) or the model has none."""
    for key in MODELS[model].sizes[task]:
        if key == FEATURES:
            break
        value = config["models"][task].get(key)
        if value is not None:
            return list(value) if isinstance(value, list) else [value]
    return [None]


def run_models(config: Mapping, task: str) -> list[str]:
    """The model names a validated config trains on ``task``: one per model, or one per size
    of a sweep (``bilstm-h300``)."""
    names = []
    for model in config["models"][task]["run"]:
        rule = MODELS[model].sizes[task]
        sweep = any(isinstance(config["models"][task].get(key), list) for key in rule)
        names += [f"{model}-h{size}" for size in model_sizes(config, task, model)] if sweep else [model]
    return names


def pos_corpora(config: Mapping) -> list[str]:
    """The POS corpora a validated config prepares, in config order: every enabled corpus, but
    a Penn Treebank (``ptb``) copy only when its ``path`` is given."""
    return [
        name
        for name, corpus in config["corpora"].items()
        if corpus["enabled"] and (corpus["format"] != "ptb" or corpus.get("path"))
    ]


def paper_corpora(config: Mapping) -> dict[str, str]:
    """The prepared POS corpora that stand for the paper's Table 2 data, with what each is to it
    (its ``paper`` key: ``data`` or ``stand-in``); the verdict tests the paper's claims on these
    only, and a corpus of one's own (``paper: none``, the default) is compared without one."""
    return {
        name: config["corpora"][name]["paper"]
        for name in pos_corpora(config)
        if config["corpora"][name].get("paper", "none") != "none"
    }


def timed_pos_corpus(config: Mapping) -> str | None:
    """The POS corpus whose models the timing stage measures: ``timing.pos_corpus``, else the
    first Penn Treebank copy given (the paper timed WSJ), else the first corpus; None: none."""
    names = pos_corpora(config)
    if config["timing"]["pos_corpus"] is not None:
        return config["timing"]["pos_corpus"]
    ptb = [name for name in names if config["corpora"][name]["format"] == "ptb"]
    return (ptb or names or [None])[0]


def walk_biases_trained(config: Mapping) -> list[float]:
    """The walk biases b whose walks the models learn: ``models.walks.b``, else every ``walks.b``
    (none when ``models.walks.run`` is empty)."""
    if not config["models"]["walks"]["run"]:
        return []
    return [float(b) for b in config["models"]["walks"]["b"] or config["walks"]["b"]]


def timed_walk_b(config: Mapping) -> float | None:
    """The walk set whose models the timing stage measures: ``timing.walk_b``, else 0.5 (the
    paper's) when trained, else the first bias trained; None: no walks are learnt."""
    if config["timing"]["walk_b"] is not None:
        return float(config["timing"]["walk_b"])
    trained = walk_biases_trained(config)
    return 0.5 if 0.5 in trained else (trained or [None])[0]


def bias_name(b: float) -> str:
    """The walk set's folder name of a bias b: ``b2`` for 2.0, ``b0.25`` for 0.25 (``{b:g}``)."""
    return f"b{float(b):g}"


def timed_pos_models(config: Mapping) -> list[str]:
    """The POS models of a validated config that the timing stage measures (the perceptron has
    no layer to time)."""
    return [model for model in config["models"]["pos"]["run"] if MODELS[model].cell is not None]
