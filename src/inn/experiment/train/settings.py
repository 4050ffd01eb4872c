"""A training run's settings: :class:`TrainConfig`, where ``inn train`` reads it from (``--settings``,
``--settings-file``, ``--seed``) and the record of them that every checkpoint stores and a resumed
run must match (:func:`_run_settings`).

Every setting is checked against the config schema, so a workflow config, ``inn train
--settings`` and a caller of :func:`~inn.experiment.train.loop.train` follow one rule per key.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from inn.errors import InnError
from inn.experiment.config import check_model_solver, training_defaults
from inn.experiment.config_schema import check_settings
from inn.models import ModelConfig


@dataclass
class TrainConfig:
    """Training settings (workflow config ``training.<task>``)."""

    batch_size: int = 20  # paper
    lr: float = 0.5  # paper: initial learning rate of plain SGD
    lr_decay: float = 0.5  # paper: multiply the rate by this when validation perplexity rises
    max_epochs: int = 30
    patience: int = 5  # stop after this many epochs without a better validation metric
    clip: float | None = 5.0  # max gradient norm (None: no clipping)
    # "sentence": summed token losses / sentences in the batch; "token": mean over tokens;
    # "sum": summed over the batch. With lr 0.5, "token" learns ~10x slower than "sentence".
    loss: str = "sentence"
    word_dropout: float = 0.25  # POS: chance that a training singleton is read as unknown
    dropout: float = 0.0  # on xi and H (the paper uses none)
    max_train: int | None = None  # use only the first N training sequences
    max_dev: int | None = None  # use only the first N validation sequences
    seed: int = 1
    # INN: start each training sentence's solve from its solution in the previous epoch
    warm_start: bool = True
    # INN: the same for the adjoint solve of the backward pass (its previous epoch's adjoint)
    warm_start_adjoint: bool = False
    # INN: Jacobian regularisation, weight * (Hutchinson estimate of ||dF/dH||_F^2 at the
    # solution per state entry) added to the loss every jacobian_every-th batch (0: off)
    jacobian_weight: float = 0.0
    jacobian_samples: int = 1
    jacobian_every: int = 1

    def __post_init__(self) -> None:
        """Check every setting against the config schema's ``training`` definition and the seed
        against ``seed``'s: one rule per setting, the same for a workflow config, ``inn train
        --settings`` and a caller of :func:`~inn.experiment.train.loop.train`."""
        settings = asdict(self)
        seed = settings.pop("seed")
        check_settings(settings, "$defs/training", key="training")
        check_settings(seed, "properties/seed", key="training.seed")


def _run_settings(model_cfg: ModelConfig, cfg: TrainConfig) -> dict[str, Any]:
    """What a resumed run must share with the run that wrote the checkpoint."""
    return {"model": asdict(model_cfg), "training": asdict(cfg)}


def _json_settings(text: str, where: str) -> dict:
    """The settings object in ``text`` (from ``where``), checked against the config schema's
    ``run_settings``: an unknown section or key, a wrong type or a value out of range is one
    line naming it (a misspelt ``"trainig"`` is refused, not ignored)."""
    try:
        settings = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InnError(f"{where} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    check_settings(settings, "$defs/run_settings", where=where)
    check_model_solver(settings.get("model", {}), where)  # the solver registry's keys, types and ranges
    return settings


def _settings_from(args) -> tuple[TrainConfig, dict, dict]:
    """The training settings, model options and meta facts of ``--settings`` or ``--settings-file``
    (one source: given both, neither would be what the run used as a whole) and ``--seed``."""
    if args.settings and args.settings_file:
        raise InnError("--settings and --settings-file both given: give the settings in one of them")
    settings = _json_settings(args.settings, "--settings") if args.settings else {}
    if args.settings_file:
        try:
            text = Path(args.settings_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InnError(
                f"cannot read --settings-file {args.settings_file}: {getattr(exc, 'strerror', None) or exc}"
            ) from None
        settings = {**_json_settings(text, f"--settings-file {args.settings_file}"), **settings}
    training = {**training_defaults(args.task), **settings.get("training", {})}  # the schema's defaults of the task
    if args.seed is not None:
        training["seed"] = args.seed
    return TrainConfig(**training), settings.get("model", {}), dict(settings.get("meta", {}))
