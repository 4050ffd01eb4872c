"""One training run as it stands (:class:`Run`): what it trains on which data, where it writes, and
how far it has got; and how a fresh one is built from a model name, its options and the prepared
data (:func:`_model_kind`, :func:`_model_config`, :func:`_start_run`).

The model is built right after the run's seed is set, so that a seeded run starts from the same
weights every time; a resumed run then loads its saved ones over them
(:func:`~inn.experiment.train.resume._resume`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from inn import batches as B
from inn.errors import InnError
from inn.experiment.train.settings import TrainConfig, _run_settings
from inn.experiment.train.task_data import TaskData
from inn.experiment.train.warm_starts import WarmStarts
from inn.models import FEATURES, MODELS, ModelConfig, SequenceLabeler, build_model, implicit_models, parse_model_name
from inn.registry import TaskSpec, task_spec


@dataclass
class Run:
    """A training run: its data, model, optimiser and warm starts, the settings and facts its
    checkpoints store, and ``state``, where it stands (what ``last.pt`` keeps as ``train_state``:
    epoch, learning rate, best metric and epoch, epochs without a better one, history rows)."""

    out_dir: Path
    data: TaskData
    cfg: TrainConfig
    model_name: str
    model_cfg: ModelConfig
    settings: dict[str, Any]  # what a resumed run must share with it (_run_settings)
    meta: dict[str, Any]  # facts stored in its checkpoints
    trained_on: dict[str, Any]  # the data's fingerprint and what a tagger file needs (describe_data)
    device: torch.device
    model: SequenceLabeler
    optimizer: torch.optim.Optimizer
    warm: WarmStarts | None  # the INN's solutions of the previous epoch
    warm_adjoint: WarmStarts | None  # and its adjoints
    state: dict[str, Any]
    save_every: float | None = None  # seconds between the states saved inside an epoch; None: none

    @property
    def spec(self) -> TaskSpec:
        return task_spec(self.data.task)

    @property
    def last_path(self) -> Path:
        """The state to resume from: after the last finished epoch, or the last batch saved in one."""
        return self.out_dir / "last.pt"

    @property
    def best_path(self) -> Path:
        """The best epoch's state so far, which becomes ``checkpoint.pt``."""
        return self.out_dir / "best.pt"


def _model_kind(model_name: str, model_options: dict[str, Any] | None) -> tuple[str, int | None]:
    """The model of ``model_name`` and the size it names, if any; the implicit layer's options
    given to a model without one are refused before any data is read."""
    kind, size = parse_model_name(model_name)
    given = [key for key in ("solver", "solver_options", "trainable_boundary") if key in (model_options or {})]
    if given and not MODELS[kind].implicit:
        raise InnError(
            f"model {model_name} has no implicit layer: model.{', model.'.join(given)} apply to "
            f"{', '.join(implicit_models())} only; leave them out of its settings"
        )
    return kind, size


def _model_config(
    model_name: str, kind: str, size: int | None, data: TaskData, cfg: TrainConfig, model_options: dict | None
) -> ModelConfig:
    """The model's config: the data decides its vocabularies and widths, the name or the options
    its hidden size (by default the feature size, for the models sized so: paper, k = 448)."""
    task = data.task
    spec = task_spec(task)
    options = dict(model_options or {})
    if size is not None:
        options["hidden_size"] = size
    if options.get("hidden_size") is None:
        if FEATURES in MODELS[kind].sizes.get(task, ()) and spec.feature_size is not None:  # paper: k = 448
            options["hidden_size"] = spec.feature_size(data.model_fields)
        else:
            raise InnError(f"model {model_name}: no hidden size given")
    return ModelConfig(task=task, kind=kind, dropout=cfg.dropout, **data.model_fields, **options)


def _start_run(
    out_dir: Path,
    data: TaskData,
    trained_on: dict[str, Any],
    model_name: str,
    model_cfg: ModelConfig,
    cfg: TrainConfig,
    meta: dict[str, Any] | None,
    device: torch.device,
) -> Run:
    """A run at its start: the model built under the run's seed, plain SGD at the initial rate
    and, for the INN, empty warm starts."""
    torch.manual_seed(cfg.seed)
    model = build_model(model_cfg).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    lengths = [B.length(e) for e in data.train]
    implicit = model_cfg.implicit
    return Run(
        out_dir=out_dir,
        data=data,
        cfg=cfg,
        model_name=model_name,
        model_cfg=model_cfg,
        settings=_run_settings(model_cfg, cfg),
        meta={"task": data.task, "model": model_name, **(meta or {}), **data.meta},
        trained_on=trained_on,
        device=device,
        model=model,
        optimizer=optimizer,
        warm=WarmStarts(lengths, model.rnn.state_size, device) if implicit and cfg.warm_start else None,
        warm_adjoint=(
            WarmStarts(lengths, model.rnn.state_size, device, torch.bfloat16)
            if implicit and cfg.warm_start_adjoint
            else None
        ),
        state={"epoch": 0, "lr": cfg.lr, "best": None, "best_epoch": 0, "bad_epochs": 0, "history": []},
    )
