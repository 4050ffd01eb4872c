"""Reading the workflow's config and checking settings against the config schema.

The schema (``config.schema.yaml`` beside this module, linked from ``workflow/schemas/``) is the
one description of every key: :func:`load_schema` reads it, :func:`read_yaml` a config file;
:func:`completing` makes a jsonschema validator fill in defaults and read the text that
``snakemake --config`` gives for typed settings, :func:`violation_line` turns a violation into one line
naming its key, and :func:`check_settings` checks settings that enter elsewhere (``inn train
--settings``, a ``TrainConfig``) against the same definitions, so that each setting has one
rule. Numbers must be finite everywhere (:func:`check_finite`): JSON Schema's ranges let
``.inf`` through.
"""

from __future__ import annotations

import copy
import functools
import math
import os
from collections.abc import Mapping
from pathlib import Path

import jsonschema
import referencing
import yaml

from inn.errors import InnError, shorten


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
    value = read_text(text)
    return value if value is not None and any(validator.is_type(value, kind) for kind in types) else text


def read_text(text: str) -> object:
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


def completing(validator_class):
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


def violation_line(error: jsonschema.ValidationError, key: str = "") -> str:
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
def cached_schema() -> dict:
    return load_schema(SCHEMA)


def check_finite(values: object, key: str) -> None:
    """Refuse an infinite or NaN number anywhere in ``values`` (YAML ``.inf``, JSON ``Infinity``):
    JSON Schema ranges let infinity through (``.inf`` exceeds any minimum), and no setting has a
    use for it: a tolerance of infinity would "converge" at once, a bias of infinity name a
    folder ``binf``."""
    if isinstance(values, float) and not math.isfinite(values):
        raise InnError(f"{key or '<top level>'}: {values} is not a finite number")
    items = values.items() if isinstance(values, dict) else enumerate(values) if isinstance(values, list) else ()
    for name, value in items:
        check_finite(value, f"{key}.{name}" if key else str(name))


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
        check_finite(values, key)
    except InnError as exc:
        raise InnError(f"{where}: {exc}" if where else str(exc)) from None
    schema = cached_schema()
    registry = referencing.Registry().with_resource(_SCHEMA_URI, referencing.Resource.from_contents(schema))
    validator = jsonschema.validators.validator_for(schema)({"$ref": f"{_SCHEMA_URI}#/{definition}"}, registry=registry)
    error = jsonschema.exceptions.best_match(validator.iter_errors(values))
    if error is not None:
        raise InnError(f"{where}: {violation_line(error, key)}" if where else violation_line(error, key))
