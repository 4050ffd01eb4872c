"""The methods ``inn benchmark`` times and the implicit layers it times them on.

Methods are one table, :data:`METHODS` (the workflow config's ``timing.benchmark.methods``
is checked against it). The layer is any implicit model of the registry
(:data:`inn.models.MODELS`, a cell of one's own included), built as training builds a model's
recurrent layer (:func:`inn.models.recurrent_layer`: a cell of one's own gets the layer's
probe and its hooks). Trained weights come from a whole checkpoint through the model config
it stores, or from a plain state_dict of the layer: the ``--model``'s layer at the sizes
whose weights have the file's shapes.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch
from torch import nn

from inn.errors import InnError
from inn.io import torch_load_data, torch_load_problem
from inn.models import (
    MODELS,
    TASKS,
    ModelConfig,
    implicit_models,
    model_with_role,
    recurrent_layer,
)
from inn.solvers import PAPER_OPTIONS

#: method name -> (solver, options). "paper" is the paper's Newton-Krylov, faithfully.
METHODS: dict[str, tuple[str, dict]] = {
    "paper": ("newton_krylov", dict(PAPER_OPTIONS)),
    "newton_krylov": ("newton_krylov", {}),
    "newton_direct": ("newton_direct", {}),
    "anderson": ("anderson", {}),
    # the same without the bfloat16 first pass (what "anderson" is where that does not pay)
    "anderson_float32": ("anderson", {"low_precision": False, "backward_low_precision": False}),
    "anderson_red_black": ("anderson", {"sweep": "red_black", "backward_solver": "anderson_red_black"}),
    # forward and adjoint solves in captured CUDA graphs, one host sync per chunk of steps
    # (inn.solvers.cuda_graph): CUDA only, against "anderson" of the same run
    "anderson_graph": ("anderson", {"cuda_graph": True}),
    # Anderson's forward with the GMRES adjoint (the same tridiagonal preconditioner)
    "anderson_gmres": ("anderson", {"backward_solver": "gmres"}),
    "fixed_point": ("fixed_point", {}),
    # Anderson's forward with an approximate backward (inn.nn.implicit_function): their
    # gradient error against the exact adjoint is in the grad_cosine / grad_error columns
    "anderson_phantom5": ("anderson", {"backward_solver": "phantom", "backward_steps": 5}),
    "anderson_phantom20": ("anderson", {"backward_solver": "phantom", "backward_steps": 20}),
    "anderson_jacobian_free": ("anderson", {"backward_solver": "jacobian_free"}),
    "anderson_preconditioned": ("anderson", {"backward_solver": "preconditioned"}),
}


def benchmarked_model(name: str | None) -> str:
    """The registry's implicit model ``name`` (default: the ``claimed`` one, the INN)."""
    name = name or model_with_role("claimed")
    if name not in implicit_models():
        raise InnError(
            f"--model {name}: not an implicit model of the registry; use one of "
            f"{', '.join(implicit_models())}, or --import the module that registers yours"
        )
    return name


def layer_config(model: str, hidden: int, input_size: int) -> ModelConfig:
    """A config whose recurrent layer is ``model``'s implicit layer, ``hidden`` wide, on inputs
    ``input_size`` wide (the task is the model's first: the layer does not depend on it)."""
    task = (MODELS[model].tasks or TASKS)[0]
    return ModelConfig(task=task, kind=model, hidden_size=hidden, num_classes=2, input_dim=input_size)


def build_layer(
    cfg: ModelConfig, input_size: int, solver: str = "anderson", options: dict[str, Any] | None = None
) -> nn.Module:
    """``cfg``'s implicit layer solved by ``solver`` with ``options`` (the trained model's
    own solver options are not kept: every method brings its own)."""
    return recurrent_layer(dataclasses.replace(cfg, solver=solver, solver_options=dict(options or {})), input_size)


def _layer_keys(model: str) -> list[str]:
    return list(build_layer(layer_config(model, 4, 3), 3).state_dict())


def _read(path: str | Path) -> object:
    fix = "give a checkpoint.pt of a trained implicit model, or a state_dict of an implicit layer"
    try:
        return torch_load_data(path, fix)
    except InnError:
        raise
    except Exception as exc:  # missing, empty, truncated, a text file, a foreign pickle
        raise InnError(f"cannot read checkpoint {path} ({torch_load_problem(path, exc)}): {fix}") from None


def load_layer_weights(
    path: str | Path, prefix: str = "", model: str | None = None
) -> tuple[ModelConfig, int, dict[str, torch.Tensor]]:
    """A trained implicit layer from a file: ``(config, input size, state_dict)``.

    A whole checkpoint (``inn train``'s) is read through the model config it stores, whatever
    the model (``model``, when given, must be it). Otherwise the file is a plain state_dict,
    or a dict whose ``"state_dict"`` or ``"model"`` entry is one, of ``model``'s layer (default
    the INN): keys under ``prefix`` are taken, stripped; without a prefix, the file's one such
    layer wherever it sits; its sizes are those at which the layer's weights have the file's
    shapes.
    """
    obj = _read(path)
    if isinstance(obj, dict) and "model_config" in obj:
        return _whole_model(obj, path, prefix, model)
    model = benchmarked_model(model)
    state = obj.get("state_dict", obj.get("model", obj)) if isinstance(obj, dict) else None
    if not isinstance(state, dict):
        raise InnError(f"{path} holds no state_dict (expected a dict of tensors or a dict with 'model')")
    keys = _layer_keys(model)
    found = sorted(
        {
            head
            for key in state
            for name in keys
            if key.endswith(name)
            for head in [key[: -len(name)]]
            if (not head or head.endswith(".")) and all(head + other in state for other in keys)
        }
    )
    if prefix and not prefix.endswith("."):
        prefix += "."
    if not prefix and "" not in found and len(found) == 1:
        prefix = found[0]  # one layer in the file (a trained model's is under "rnn.")
    if prefix not in found:
        hint = f"; {model} layers found under {', '.join(repr(f) for f in found)}" if found else ""
        raise InnError(
            f"{path} has no {model} layer weights under prefix {prefix!r}{hint}: give one of them with "
            f"--prefix, or the model they are of with --model ({', '.join(implicit_models())})"
        )
    picked = {name: state[prefix + name] for name in keys}
    return (*_sizes(model, picked, path), picked)


def _whole_model(
    payload: dict, path: str | Path, prefix: str, model: str | None
) -> tuple[ModelConfig, int, dict[str, torch.Tensor]]:
    from inn.checkpoints import model_from_payload

    labeller, _ = model_from_payload(payload, path)
    cfg = getattr(labeller, "config", None)
    if cfg is None or not cfg.implicit:
        raise InnError(f"{path} is not an implicit model's checkpoint: give a trained {' or '.join(implicit_models())}")
    if model not in (None, cfg.kind):
        raise InnError(f"{path} holds a trained {cfg.kind}, not {model}: leave --model out or give --model {cfg.kind}")
    if prefix.rstrip(".") not in ("", "rnn"):
        raise InnError(f"{path} is a whole {cfg.kind} model: its layer is 'rnn.'; leave --prefix out")
    return cfg, labeller.rnn_input_size, labeller.rnn.state_dict()


def _sizes(model: str, state: dict[str, torch.Tensor], path: str | Path) -> tuple[ModelConfig, int]:
    """``model``'s config and input size at which its layer's weights have ``state``'s shapes
    (the sizes tried are the shapes' dimensions, smallest first)."""
    want = {name: tuple(value.shape) for name, value in state.items()}
    dims = sorted({d for shape in want.values() for d in shape})
    for hidden in dims:
        for input_size in dims:
            cfg = layer_config(model, hidden, input_size)
            try:
                layer = build_layer(cfg, input_size)
            except (InnError, RuntimeError, ValueError, TypeError):  # not a size this cell takes
                continue
            if {name: tuple(value.shape) for name, value in layer.state_dict().items()} == want:
                return cfg, input_size
    raise InnError(
        f"{path}: the weights' shapes fit no size of a {model} layer: give the model they are of "
        f"with --model ({', '.join(implicit_models())})"
    )
