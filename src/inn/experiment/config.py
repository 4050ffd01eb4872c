"""Workflow configuration: validated against the JSON schema, defaults filled in.

The schema (``config.schema.yaml`` beside this module, linked from ``workflow/schemas/``) is the
one description of every key. A config that breaks it fails with one line naming the key, e.g.
``config: walks.dim: -1 is less than the minimum of 1``. What a schema cannot say is checked
after it (:func:`check_config`): keys that a corpus's format does not read, and settings that
name something the run does not have (a timed corpus or walk set, a walk bias), which would
otherwise drop results without a word.

The pieces live by concept, each re-exported here: reading the config and the schema, and
checking settings that enter elsewhere (``inn train --settings``) against the same definitions
(:mod:`inn.experiment.config_schema`); what a validated config runs, its corpora, models, walk
biases and timed ones (:mod:`inn.experiment.config_runs`, asked by the workflow and the
report); and the files and folders the prepared corpora name, checked before any job runs
(:func:`check_inputs`, :mod:`inn.experiment.config_inputs`).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping

import jsonschema

from inn.errors import InnError
from inn.experiment.config_inputs import check_inputs as check_inputs
from inn.experiment.config_runs import bias_name as bias_name
from inn.experiment.config_runs import model_sizes as model_sizes
from inn.experiment.config_runs import paper_corpora as paper_corpora
from inn.experiment.config_runs import pos_corpora as pos_corpora
from inn.experiment.config_runs import run_models as run_models
from inn.experiment.config_runs import timed_pos_corpus as timed_pos_corpus
from inn.experiment.config_runs import timed_pos_models, walk_biases_trained
from inn.experiment.config_runs import timed_walk_b as timed_walk_b
from inn.experiment.config_schema import SCHEMA as SCHEMA
from inn.experiment.config_schema import (
    cached_schema,
    check_finite,
    completing,
    read_text,
    violation_line,
)
from inn.experiment.config_schema import check_settings as check_settings
from inn.experiment.config_schema import load_schema as load_schema
from inn.experiment.config_schema import read_yaml as read_yaml
from inn.models import BUILTIN_CELLS, MODELS, ROLES, ModelConfig, model_with_role, recurrent_layer
from inn.solvers import SOLVERS, check_solver_options, solver_options

#: The keys each corpus format reads, beside ``enabled`` and ``format``.
FORMAT_KEYS = {
    "conllu": ("train", "dev", "test", "tags"),
    "tsv": ("train", "dev", "test"),
    "ptb": ("path",),
    "nltk_treebank": ("nltk_data",),
}


def training_defaults(task: str) -> dict:
    """The schema's default training settings of ``task`` (``training.pos`` or ``training.walks``):
    what ``inn train`` uses for a setting that ``--settings`` does not give, as the workflow does."""
    return validate_config({}, cached_schema())["training"][task]


def validate_config(config: dict, schema: Mapping | str | os.PathLike) -> dict:
    """Validate ``config`` in place against ``schema``, filling defaults and reading the text
    that ``snakemake --config`` gives for numbers, booleans and null (:func:`_typed`); return it.

    Raises:
        InnError: the first violation (the deepest, most specific one), as one line that
            names the key.
    """
    try:
        check_finite(config, "")
    except InnError as exc:
        raise InnError(f"config: {exc}") from None
    if not isinstance(schema, Mapping):
        schema = load_schema(schema)
    _import_user_modules(config)
    schema = with_registry(schema)
    validator_class = jsonschema.validators.validator_for(schema)
    validator = completing(validator_class)(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(config))
    if error is not None:
        raise InnError(f"config: {violation_line(error)}")
    check_config(config)
    _probe_cells(config)
    return config


def _import_user_modules(config: Mapping) -> None:
    """Import the config's ``imports`` (:mod:`inn.user_modules`) before its model names are
    checked, so that a model they register is one the config may name, and check that the
    paper's models still play their roles (:data:`inn.models.ROLES`) after them. A malformed
    list is left to the schema's line."""
    names = config.get("imports")
    if isinstance(names, list) and all(isinstance(name, str) for name in names):
        from inn.user_modules import import_modules

        import_modules(names, "config: imports")
        for role in ROLES:
            try:
                model_with_role(role)
            except InnError as error:
                raise InnError(f"config: imports: {error}") from None


def _probe_cells(config: Mapping) -> None:
    """Build, tiny, the implicit layer of each model the config runs on a cell of one's own, so
    that a cell that misbehaves on the layer's probe (:mod:`inn.nn.probe`) or fails to build is
    refused now, before any data is prepared (the package's own cells are tested)."""
    for task, section in config["models"].items():
        for kind in dict.fromkeys(section.get("run") or []):
            spec = MODELS.get(kind)
            if spec is None or not spec.implicit or spec.cell in BUILTIN_CELLS:
                continue
            try:
                recurrent_layer(ModelConfig(task=task, kind=kind, hidden_size=4, num_classes=2, input_dim=3), 3)
            except Exception as exc:  # noqa: BLE001 - the user's cell: its error, one line naming the model
                text = (str(exc).strip().splitlines() or [""])[0]
                what = text if isinstance(exc, InnError) else f"building its layer failed: {type(exc).__name__}: {text}"
                raise InnError(f"config: models.{task}.run: model {kind}: {what}") from None


def with_registry(schema: Mapping) -> dict:
    """``schema`` with the model lists (``models.<task>.run``) taken from the registry
    (:data:`inn.models.MODELS`): a model registered there is a model the config may name; and
    likewise the solver names (``solver.name``) from :data:`inn.solvers.SOLVERS` and the
    benchmark's methods (``timing.benchmark.methods``) from
    :data:`inn.experiment.timing.benchmark_layers.METHODS`."""
    from inn.experiment.timing.benchmark_layers import METHODS

    schema = copy.deepcopy(dict(schema))
    tasks = schema["properties"]["models"]["properties"]
    for task, section in tasks.items():
        section["properties"]["run"]["items"]["enum"] = [name for name, spec in MODELS.items() if task in spec.tasks]
    schema["properties"]["solver"]["properties"]["name"]["enum"] = list(SOLVERS)
    benchmark = schema["properties"]["timing"]["properties"]["benchmark"]["properties"]
    benchmark["methods"]["items"]["enum"] = list(METHODS)
    return schema


def check_model_solver(model: Mapping, where: str) -> None:
    """Check the solver and solver options of ``model`` settings (``inn train --settings``'s
    ``model`` section) against the solver registry, as the workflow's config check does.

    Raises:
        InnError: ``<where>: model.solver_options.<key>: <problem>`` (or ``model.solver``).
    """
    if "solver" in model or "solver_options" in model:
        name = model.get("solver", ModelConfig.solver)  # the layer's default solver
        check_solver_options(
            name,
            model.get("solver_options") or {},
            f"{where}: model.solver_options",
            name_where=f"{where}: model.solver",
        )


def _check_bias_names(biases: list[float]) -> None:
    """Every walk bias names its own folder, and the folder's name gives back the bias itself:
    ``{b:g}`` keeps six significant digits, so 0.5 and 0.5000001 would share ``b0.5`` (one
    Table 1 row lost) and 0.3333333 would be generated as 0.333333."""
    seen: dict[str, int] = {}
    for i, b in enumerate(biases):
        name = bias_name(b)
        if name in seen:
            raise InnError(
                f"config: walks.b.{i}: {b!r} would share the folder {name} with walks.b.{seen[name]} "
                f"({biases[seen[name]]!r}), and one of them would be lost; give b with at most 6 "
                "significant digits"
            )
        if float(name[1:]) != b:
            raise InnError(
                f"config: walks.b.{i}: {b!r} would be generated and labelled as {name[1:]} (its folder "
                f"{name} keeps 6 significant digits); give b with at most 6 significant digits"
            )
        seen[name] = i


def _read_option_text(name: str, options: dict) -> None:
    """``solver.options`` given on the command line, as :func:`_typed` reads the schema's
    settings: text an option refuses becomes what YAML reads in it where the option takes that
    (``--config solver='{options: {backward_tol: 1e-3}}'``), ``null`` null where it may be null."""
    known = solver_options(name, "config: solver.name")
    for key, text in options.items():
        option = known.get(key)
        if option is None or not isinstance(text, str) or option.problem(text) is None:
            continue
        if text == "null" and option.nullable:
            options[key] = None
            continue
        value = read_text(text)
        if value is not None and option.problem(value) is None:
            options[key] = value


def check_config(config: Mapping) -> None:
    """What the schema cannot say, checked on a schema-valid config with its defaults.

    Raises:
        InnError: a solver option the solver does not take or whose value it refuses
            (:func:`inn.solvers.check_solver_options`), a corpus key its format does not
            read, a setting that names a corpus, walk set or bias the run does not have, or
            taggers to train without a corpus to train them on (one line naming the key).
    """
    _read_option_text(config["solver"]["name"], config["solver"]["options"])
    check_solver_options(
        config["solver"]["name"],
        config["solver"]["options"],
        "config: solver.options",
        name_where="config: solver.name",
    )
    for name, corpus in config["corpora"].items():
        allowed = FORMAT_KEYS[corpus["format"]]
        for key in corpus:
            if key not in ("enabled", "format", "paper", *allowed):
                raise InnError(
                    f"config: corpora.{name}.{key}: a {corpus['format']} corpus does not read it "
                    f"(it reads {', '.join(allowed)})"
                )
    corpora = pos_corpora(config)
    if config["models"]["pos"]["run"] and not corpora:  # e.g. config/tagger.yaml given without a corpus of one's own
        raise InnError(
            f"config: models.pos.run: {', '.join(config['models']['pos']['run'])} would be trained, but no "
            'corpus is enabled: add one under corpora (README, "Your own corpus"), or set '
            "models.pos.run: []"
        )
    timing = config["timing"]
    if timing["enabled"] and timing["pos_corpus"] is not None and timing["pos_corpus"] not in corpora:
        raise InnError(
            f"config: timing.pos_corpus: {timing['pos_corpus']!r} is not a corpus this run prepares "
            f"({', '.join(corpora) or 'none'}); name one of them, or null"
        )
    biases = [float(b) for b in config["walks"]["b"]]
    _check_bias_names(biases)
    learnt = config["models"]["walks"]["b"]
    for i, b in enumerate(learnt or []):
        if float(b) not in biases:
            raise InnError(
                f"config: models.walks.b.{i}: {b:g} is not one of walks.b ({', '.join(f'{x:g}' for x in biases)})"
            )
    if timing["enabled"] and timing["pos_corpus"] is not None and not timed_pos_models(config):
        raise InnError(
            f"config: timing.pos_corpus: {timing['pos_corpus']!r} is named, but no neural POS model is "
            f"trained (models.pos.run: {config['models']['pos']['run']}), so none would be timed; "
            "set timing.pos_corpus: null, or add a model to models.pos.run"
        )
    trained = walk_biases_trained(config)
    if timing["enabled"] and timing["walk_b"] is not None and float(timing["walk_b"]) not in trained:
        raise InnError(
            f"config: timing.walk_b: {timing['walk_b']:g} is not among the walk biases trained "
            f"({', '.join(f'{x:g}' for x in trained) or 'none'}); name one of them, or null"
        )
