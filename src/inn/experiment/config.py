"""Workflow configuration: validated against the JSON schema, defaults filled in.

The schema (``workflow/schemas/config.schema.yaml``) is the one description of every key. A
config that breaks it fails with one line naming the key, e.g.
``config: walks.dim: -1 is less than the minimum of 1``. What a schema cannot say is checked
after it (:func:`check_config`): keys that a corpus's format does not read, and settings that
name something the run does not have (a timed corpus or walk set, a walk bias), which would
otherwise drop results without a word.

:func:`check_inputs` checks that the files and folders the prepared corpora name exist, so
a wrong path is one line naming its key before any job runs.

:func:`pos_corpora` and :func:`timed_pos_corpus` say which corpora a validated config prepares
and times; the workflow and the report ask them.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import jsonschema
import yaml

from inn.errors import InnError
from inn.models import FEATURES, MODELS


def _with_defaults(validator_class):
    """Extend a jsonschema validator so that validating fills in ``default`` values."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if "default" in sub and name not in instance:
                    instance[name] = copy.deepcopy(sub["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


#: The keys each corpus format reads, beside ``enabled`` and ``format``.
FORMAT_KEYS = {
    "conllu": ("train", "dev", "test", "tags"),
    "tsv": ("train", "dev", "test"),
    "ptb": ("path",),
    "nltk_treebank": ("nltk_data",),
}
#: the keys of each format that name a file or folder the corpus is read from
PATH_KEYS = {"conllu": ("train", "dev", "test"), "tsv": ("train", "dev", "test"), "ptb": ("path",),
             "nltk_treebank": ("nltk_data",)}


def _where(error: jsonschema.ValidationError) -> str:
    path = ".".join(str(p) for p in error.absolute_path)
    if "propertyNames" in error.relative_schema_path:
        return f"{path}.{error.instance}: not a usable name ({error.schema.get('description', error.message)})"
    if error.validator == "additionalProperties":
        # jsonschema names the unknown key only in the message; put it in the path.
        extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        path = ".".join(filter(None, [path, extra[0] if extra else ""]))
        return f"{path}: unknown key (allowed: {', '.join(sorted(error.schema.get('properties', {})))})"
    return f"{path or '<top level>'}: {error.message}"


def load_schema(path: str | os.PathLike) -> dict:
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def validate_config(config: dict, schema: Mapping | str | os.PathLike) -> dict:
    """Validate ``config`` in place against ``schema``, filling defaults; return it.

    Raises:
        InnError: the first violation (the deepest, most specific one), as one line that
            names the key.
    """
    if not isinstance(schema, Mapping):
        schema = load_schema(schema)
    schema = with_registry(schema)
    validator_class = jsonschema.validators.validator_for(schema)
    validator = _with_defaults(validator_class)(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(config))
    if error is not None:
        raise InnError(f"config: {_where(error)}")
    check_config(config)
    return config


def with_registry(schema: Mapping) -> dict:
    """``schema`` with the model lists (``models.<task>.run``) taken from the registry
    (:data:`inn.models.MODELS`): a model registered there is a model the config may name."""
    schema = copy.deepcopy(dict(schema))
    tasks = schema["properties"]["models"]["properties"]
    for task, section in tasks.items():
        section["properties"]["run"]["items"]["enum"] = [name for name, spec in MODELS.items() if task in spec.tasks]
    return schema


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
    return [name for name, corpus in config["corpora"].items()
            if corpus["enabled"] and (corpus["format"] != "ptb" or corpus.get("path"))]


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


def check_config(config: Mapping) -> None:
    """What the schema cannot say, checked on a schema-valid config with its defaults.

    Raises:
        InnError: a corpus key its format does not read, or a setting that names a corpus,
            walk set or bias the run does not have (one line naming the key).
    """
    for name, corpus in config["corpora"].items():
        allowed = FORMAT_KEYS[corpus["format"]]
        for key in corpus:
            if key not in ("enabled", "format", *allowed):
                raise InnError(f"config: corpora.{name}.{key}: a {corpus['format']} corpus does not read it "
                               f"(it reads {', '.join(allowed)})")
    corpora = pos_corpora(config)
    timing = config["timing"]
    if timing["enabled"] and timing["pos_corpus"] is not None and timing["pos_corpus"] not in corpora:
        raise InnError(f"config: timing.pos_corpus: {timing['pos_corpus']!r} is not a corpus this run prepares "
                       f"({', '.join(corpora) or 'none'}); name one of them, or null")
    biases = [float(b) for b in config["walks"]["b"]]
    learnt = config["models"]["walks"]["b"]
    for i, b in enumerate(learnt or []):
        if float(b) not in biases:
            raise InnError(f"config: models.walks.b.{i}: {b:g} is not one of walks.b ({', '.join(f'{x:g}' for x in biases)})")
    trained = walk_biases_trained(config)
    if timing["enabled"] and timing["walk_b"] is not None and float(timing["walk_b"]) not in trained:
        raise InnError(f"config: timing.walk_b: {timing['walk_b']:g} is not among the walk biases trained "
                       f"({', '.join(f'{x:g}' for x in trained) or 'none'}); name one of them, or null")


def check_inputs(config: Mapping, downloaded: Iterable[str | os.PathLike] = (), root: str | os.PathLike = ".") -> None:
    """Every file or folder a prepared corpus names exists (relative paths from ``root``, the
    workflow's working directory), except under ``downloaded``: the folders the workflow's own
    download rules fill (UD EWT, NLTK's data).

    Raises:
        InnError: one line naming the key, the path and the fix.
    """
    downloads = [Path(folder) for folder in downloaded]
    for name in pos_corpora(config):
        corpus = config["corpora"][name]
        for key in PATH_KEYS[corpus["format"]]:
            path = corpus.get(key)
            if path is None or any(Path(path) == d or d in Path(path).parents for d in downloads):
                continue
            if not (Path(root) / path).exists():
                where = "" if Path(path).is_absolute() else f" (relative to {Path(root).resolve()})"
                raise InnError(f"config: corpora.{name}.{key}: {path} does not exist{where}; correct the path, "
                               f"or set corpora.{name}.enabled: false")
