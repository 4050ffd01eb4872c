"""Workflow configuration: validated against the JSON schema, defaults filled in.

The schema (``workflow/schemas/config.schema.yaml``) is the one description of every key. A
config that breaks it fails with one line naming the key, e.g.
``config: walks.dim: -1 is less than the minimum of 1``.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
import jsonschema
import yaml

from inn.errors import InnError


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


def _where(error: jsonschema.ValidationError) -> str:
    path = ".".join(str(p) for p in error.absolute_path)
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
    validator_class = jsonschema.validators.validator_for(schema)
    validator = _with_defaults(validator_class)(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(config))
    if error is not None:
        raise InnError(f"config: {_where(error)}")
    return config
