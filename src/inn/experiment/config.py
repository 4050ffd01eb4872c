"""Workflow configuration: validated against the JSON schema, defaults filled in.

The schema (``config.schema.yaml`` beside this module, linked from ``workflow/schemas/``) is the
one description of every key. A config that breaks it fails with one line naming the key, e.g.
``config: walks.dim: -1 is less than the minimum of 1``. What a schema cannot say is checked
after it (:func:`check_config`): keys that a corpus's format does not read, and settings that
name something the run does not have (a timed corpus or walk set, a walk bias), which would
otherwise drop results without a word.

:func:`check_inputs` checks that the files and folders the prepared corpora name exist and
can be read (a split file that is a folder or holds no sentence, an NLTK data folder without
the treebank sample), so a wrong path is one line naming its key before any job runs.

:func:`check_settings` checks settings that enter elsewhere (``inn train --settings``, a
``TrainConfig``) against the same schema's definitions, so that each setting has one rule.
Numbers must be finite everywhere: JSON Schema's ranges let ``.inf`` through.

:func:`pos_corpora` and :func:`timed_pos_corpus` say which corpora a validated config prepares
and times; the workflow and the report ask them.
"""

from __future__ import annotations

import copy
import functools
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import jsonschema
import referencing
import yaml

from inn.data.corpora import FILE_SPLITS, has_tokens
from inn.errors import InnError, shorten
from inn.io import check_distinct_splits
from inn.models import (
    BUILTIN_CELLS,
    FEATURES,
    MODELS,
    ROLES,
    ModelConfig,
    model_with_role,
    recurrent_layer,
)
from inn.solvers import SOLVERS, check_solver_options, solver_options


def _typed(text: str, schema: Mapping, validator) -> object:
    """``text`` as YAML reads it where ``schema`` wants a value of another type, else ``text``.

    Snakemake's ``--config key=value`` reads every value nested in a list or mapping as text
    (``--config seeds='[1, 2, 3]'`` gives ``['1', '2', '3']``), so a setting given on the command
    line would fail its type. Text becomes the number, boolean, list or mapping it spells when
    the schema wants that type and not text; ``null`` becomes null wherever null is allowed (no
    folder is named ``null``). Anything else stays text, for the schema's line.
    """
    types = schema.get("type") if isinstance(schema, Mapping) else None
    if types is None:
        return text
    types = [types] if isinstance(types, str) else list(types)
    if text == "null" and "null" in types:
        return None
    if "string" in types:
        return text
    value = _read_text(text)
    return value if value is not None and any(validator.is_type(value, kind) for kind in types) else text


def _read_text(text: str) -> object:
    """What ``text`` spells as YAML (a number in Python's spelling too: PyYAML reads ``1e-3``
    as text), or None where it spells only text, null or a number that is not finite. Booleans
    are ``true`` and ``false`` alone, not YAML 1.1's ``yes``, ``on`` and the like."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    if isinstance(value, bool) and text.lower() not in ("true", "false"):
        return None
    if isinstance(value, str):
        for number in (int, float):
            try:
                value = number(text)
                break
            except ValueError:
                pass
    if isinstance(value, str) or (isinstance(value, float) and not math.isfinite(value)):
        return None
    return value


def _completing(validator_class):
    """Extend a jsonschema validator so that validating fills in ``default`` values and reads
    text given for typed settings (:func:`_typed`), both in place."""
    validate_properties = validator_class.VALIDATORS["properties"]
    validate_items = validator_class.VALIDATORS["items"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if isinstance(instance.get(name), str):
                    instance[name] = _typed(instance[name], sub, validator)
                if "default" in sub and name not in instance:
                    instance[name] = copy.deepcopy(sub["default"])
                elif isinstance(sub.get("default"), dict) and isinstance(instance.get(name), dict):
                    # a section given in part keeps its own defaults (training.walks' loss), not
                    # those of the definition it shares (training.pos')
                    for key, value in sub["default"].items():
                        instance[name].setdefault(key, copy.deepcopy(value))
        yield from validate_properties(validator, properties, instance, schema)

    def read_items(validator, items, instance, schema):
        if isinstance(instance, list):
            instance[:] = [_typed(value, items, validator) if isinstance(value, str) else value for value in instance]
        yield from validate_items(validator, items, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults, "items": read_items})


#: The keys each corpus format reads, beside ``enabled`` and ``format``.
FORMAT_KEYS = {
    "conllu": ("train", "dev", "test", "tags"),
    "tsv": ("train", "dev", "test"),
    "ptb": ("path",),
    "nltk_treebank": ("nltk_data",),
}
#: the keys of each format that name a file or folder the corpus is read from
PATH_KEYS = {
    "conllu": ("train", "dev", "test"),
    "tsv": ("train", "dev", "test"),
    "ptb": ("path",),
    "nltk_treebank": ("nltk_data",),
}


def _where(error: jsonschema.ValidationError, key: str = "") -> str:
    """``<key>: <problem>`` for a schema violation, the key its dotted path below ``key``."""
    path = shorten(".".join([key, *map(str, error.absolute_path)] if key else map(str, error.absolute_path)))
    if "propertyNames" in error.relative_schema_path:
        why = error.schema.get("description", error.message)
        return f"{path}.{shorten(str(error.instance))}: not a usable name ({why})"
    if error.validator == "additionalProperties":
        # jsonschema names the unknown key only in the message; put it in the path.
        extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        path = ".".join(filter(None, [path, extra[0] if extra else ""]))
        return f"{path}: unknown key (allowed: {', '.join(sorted(error.schema.get('properties', {})))})"
    shown = repr(error.instance)  # jsonschema's messages quote the value whole
    return f"{path or '<top level>'}: {error.message.replace(shown, shorten(shown))}"


#: the config schema, the one description of every setting: package data, so that an installed
#: ``inn train`` checks ``--settings`` against it (:func:`check_settings`); the workflow's
#: ``workflow/schemas/config.schema.yaml`` is a link to this file
SCHEMA = Path(__file__).resolve().with_name("config.schema.yaml")
_SCHEMA_URI = "urn:inn:config-schema"


def load_schema(path: str | os.PathLike = SCHEMA) -> dict:
    """The config schema at ``path`` (default: this source tree's)."""
    try:
        with open(path, encoding="utf-8") as handle:
            return yaml.safe_load(handle)
    except OSError as exc:
        raise InnError(
            f"cannot read the config schema {path}: {exc.strerror or exc} (it is installed with inn: reinstall it)"
        ) from None


def read_yaml(path: str | os.PathLike) -> object:
    """The YAML (or JSON) document in the file ``path``, as the workflow reads its ``config.yaml``.

    Raises:
        InnError: the file cannot be read, is not UTF-8, or is not YAML; the last names the
            line and column where the parser stopped (Snakemake's own message names neither
            the file nor the line).
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InnError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
        context = getattr(exc, "context", None)
        begun = getattr(exc, "context_mark", None)
        if context and begun is not None:
            problem += f" ({context} begun on line {begun.line + 1})"
        fix = "indent with spaces, not tabs" if "'\\t'" in problem else "correct the file there"
        raise InnError(f"{where}: not valid YAML: {problem}; {fix}") from None


@functools.cache
def _schema() -> dict:
    return load_schema(SCHEMA)


def training_defaults(task: str) -> dict:
    """The schema's default training settings of ``task`` (``training.pos`` or ``training.walks``):
    what ``inn train`` uses for a setting that ``--settings`` does not give, as the workflow does."""
    return validate_config({}, _schema())["training"][task]


def _check_finite(values: object, key: str) -> None:
    """Refuse an infinite or NaN number anywhere in ``values`` (YAML ``.inf``, JSON ``Infinity``):
    JSON Schema ranges let infinity through (``.inf`` exceeds any minimum), and no setting has a
    use for it: a tolerance of infinity would "converge" at once, a bias of infinity name a
    folder ``binf``."""
    if isinstance(values, float) and not math.isfinite(values):
        raise InnError(f"{key or '<top level>'}: {values} is not a finite number")
    items = values.items() if isinstance(values, dict) else enumerate(values) if isinstance(values, list) else ()
    for name, value in items:
        _check_finite(value, f"{key}.{name}" if key else str(name))


def check_settings(values: object, definition: str, where: str = "", key: str = "") -> None:
    """Check ``values`` against one definition of the config schema, e.g. ``"$defs/training"``
    (a ``TrainConfig``) or ``"$defs/run_settings"`` (``inn train --settings``): the same check a
    workflow config gets, so that each setting has one rule wherever it enters.

    Args:
        where: what the values came from, e.g. ``"--settings"``, put before the line.
        key: the dotted key of ``values`` themselves, e.g. ``"training"``.

    Raises:
        InnError: the first violation, as one line ``[<where>: ]<key>: <problem>``.
    """
    try:
        _check_finite(values, key)
    except InnError as exc:
        raise InnError(f"{where}: {exc}" if where else str(exc)) from None
    schema = _schema()
    registry = referencing.Registry().with_resource(_SCHEMA_URI, referencing.Resource.from_contents(schema))
    validator = jsonschema.validators.validator_for(schema)({"$ref": f"{_SCHEMA_URI}#/{definition}"}, registry=registry)
    error = jsonschema.exceptions.best_match(validator.iter_errors(values))
    if error is not None:
        raise InnError(f"{where}: {_where(error, key)}" if where else _where(error, key))


def validate_config(config: dict, schema: Mapping | str | os.PathLike) -> dict:
    """Validate ``config`` in place against ``schema``, filling defaults and reading the text
    that ``snakemake --config`` gives for numbers, booleans and null (:func:`_typed`); return it.

    Raises:
        InnError: the first violation (the deepest, most specific one), as one line that
            names the key.
    """
    try:
        _check_finite(config, "")
    except InnError as exc:
        raise InnError(f"config: {exc}") from None
    if not isinstance(schema, Mapping):
        schema = load_schema(schema)
    _import_user_modules(config)
    schema = with_registry(schema)
    validator_class = jsonschema.validators.validator_for(schema)
    validator = _completing(validator_class)(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(config))
    if error is not None:
        raise InnError(f"config: {_where(error)}")
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
        value = _read_text(text)
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


def check_inputs(config: Mapping, downloaded: Iterable[str | os.PathLike] = (), root: str | os.PathLike = ".") -> None:
    """Every file or folder a prepared corpus names exists (relative paths from ``root``, the
    workflow's working directory) and holds what its format reads, except under ``downloaded``:
    the folders the workflow's own download rules fill (UD EWT, NLTK's data).

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
            where = "" if Path(path).is_absolute() else f" (relative to {Path(root).resolve()})"
            key = f"corpora.{name}.{key}"
            if not (Path(root) / path).exists():
                raise InnError(
                    f"config: {key}: {path} does not exist{where}; correct the path, "
                    f"or set corpora.{name}.enabled: false"
                )
            _check_corpus_path(Path(root) / path, corpus["format"], f"config: {key}: {path}{where}")
        if corpus["format"] in FILE_SPLITS:
            try:
                check_distinct_splits(
                    {split: Path(root) / corpus[split] for split in FILE_SPLITS[corpus["format"]]}, f"corpora.{name}."
                )
            except InnError as exc:
                raise InnError(f"config: {exc}") from None


def _check_corpus_path(path: Path, format: str, where: str) -> None:
    """What can be known of an existing corpus path before any job runs: a split file that is
    a folder or holds no sentence, an NLTK data folder without the treebank sample."""
    if format in FILE_SPLITS:
        if path.is_dir():
            raise InnError(f"{where} is a folder, not a {format} file: name the file itself")
        try:
            empty = not has_tokens(path, format)
        except InnError as exc:
            raise InnError(f"{where}: {exc}") from None
        if empty:
            raise InnError(f"{where} holds no sentences: name a file with at least one")
    elif format == "nltk_treebank" and not any(
        (path / "corpora" / name).exists() for name in ("treebank", "treebank.zip")
    ):
        raise InnError(
            f"{where} holds no corpora/treebank (NLTK's treebank sample): run `inn download-treebank "
            "--out-dir DIR` and name DIR, or null to search NLTK_DATA"
        )
