"""Checkpoints and tagger files: the one module that writes and reads trained models of either
kind, a neural model (:mod:`inn.models`) or the averaged perceptron (:mod:`inn.tagging.perceptron`).

It lives here, where both kinds are known, so that neither module needs the other.

A file is a dict of plain values and tensors, read with ``torch.load(weights_only=True)``: a
shared model file cannot run code. Format 2 (this version) holds:

- ``format``, ``inn_version``: the layout and the library version that wrote it;
- the model: ``model_config`` and ``state_dict`` (neural) or ``perceptron`` (its weights);
- ``meta``: task, corpus (``dataset``), model name, seed, scale, training settings, the epoch
  the weights come from and the dev score (``dev``); a tagger file adds the test score
  (``test``, :func:`with_test_scores`);
- ``data``: what the model was trained on (:func:`describe_data`): the data folder's
  ``fingerprint`` (:mod:`inn.data.fingerprint`), and for POS the feature ``vocabularies``
  (the tag set among them), the CoNLL-U ``column`` it predicts, the ``corpus`` name, its
  ``format`` and ``language`` (how raw text is split into its words, :mod:`inn.tagging.tokenize`)
  and ``dev_unseen``, the share of its dev tokens unseen in training. With these a POS
  checkpoint tags text alone (:class:`inn.tagging.tagger.Tagger`);
- in a trainer's ``last.pt`` also its resume state (``settings``, ``optimizer``,
  ``train_state``, warm starts);
- ``weights_sha256``: the digest of its own weights (:func:`weights_digest`), written when it
  is saved and checked whenever it is read (:func:`weights_problem`): a file whose weights
  were damaged or altered since, or are not finite, is refused. Files written before it
  existed load with a warning.

Format 1 (inn before data fingerprints) had no ``data`` section: such files still load for
evaluation and resume, and :func:`self_contained` converts one with its prepared folder.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import logging
import os
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from inn.errors import InnError
from inn.io import torch_load_data, torch_load_problem
from inn.models import CELLS, MODELS, ModelConfig, SequenceLabeler, build_model
from inn.registry import TASKS, tagging_task, task_spec
from inn.user_modules import missing_error, needed_by, recorded

if TYPE_CHECKING:  # the tagger package reads checkpoints: its perceptron is imported where a payload needs it
    from inn.tagging.perceptron import PerceptronPeer

log = logging.getLogger(__name__)

#: the layout of the files this version writes
CHECKPOINT_FORMAT = 2
#: the layouts it reads (1: before the ``data`` section)
READABLE_FORMATS = (1, 2)
#: the trainer's resume state, which a tagger file leaves out
TRAINER_STATE_KEYS = ("settings", "optimizer", "train_state", "warm_starts", "warm_adjoints")
#: the key of a model file's digest of its own weights (:func:`sealed`)
OWN_DIGEST = "weights_sha256"
#: the CoNLL-U column a POS model predicts when its data does not say (tsv, PTB, NLTK corpora)
DEFAULT_COLUMN = "xpos"
COLUMNS = ("xpos", "upos")


def _version() -> str:
    import inn

    return inn.__version__


def describe_data(
    folder: str | os.PathLike, task: str, column: str | None = None, max_train: int | None = None
) -> dict[str, Any]:
    """The ``data`` section of a checkpoint trained on the prepared ``folder``, whose files must
    be as the data stage wrote them (:func:`inn.data.fingerprint.checked_fingerprint`).

    Args:
        task: ``pos`` (the section adds the feature vocabularies, the tag column and the
            corpus name) or ``walks`` (the fingerprint alone).
        column: the CoNLL-U column the tags came from; default: what the data stage recorded
            in ``prepared.json``, else :data:`DEFAULT_COLUMN`.
        max_train: the run trains on the first ``max_train`` sentences only: the vocabularies'
            ``word_counts`` (which words count as seen in training, for unseen-word accuracy)
            are then those of the sentences it trains on, not of the whole split.
    """
    from inn.data.fingerprint import checked_fingerprint, read_record

    folder = Path(folder)
    section: dict[str, Any] = {"fingerprint": checked_fingerprint(folder)}
    if task_spec(task).tags:
        record = read_record(folder)
        column = column or record.get("column") or DEFAULT_COLUMN
        if column not in COLUMNS:
            raise InnError(f"unknown tag column {column!r}: use {' or '.join(COLUMNS)}")
        features = json.loads((folder / "features.json").read_text(encoding="utf-8"))
        if max_train is not None:
            from collections import Counter

            from inn.data.tagged import read_tagged

            counts = Counter(
                w.lower() for sentence in read_tagged(folder / "train.tsv")[:max_train] for w, _ in sentence
            )
            features["word_counts"] = dict(counts.most_common())
        section.update(
            corpus=record.get("corpus", folder.name),
            column=column,
            vocabularies=features,
            format=record.get("format"),
            language=record.get("language"),
            dev_unseen=dev_unseen_share(folder, features["word_counts"]),
        )
    return section


def dev_unseen_share(folder: str | os.PathLike, word_counts: dict[str, int]) -> float | None:
    """The share of the prepared ``folder``'s dev tokens whose word training never showed (as
    unseen-word accuracy counts them, lowercased): what a tagger's text normally holds, against
    which ``inn tag`` judges whether a text is foreign to it. ``None`` without a dev split."""
    from inn.data.tagged import read_tagged

    path = Path(folder) / "dev.tsv"
    if not path.is_file():
        return None
    words = [w for sentence in read_tagged(path) for w, _ in sentence]
    return sum(w.lower() not in word_counts for w in words) / len(words) if words else None


def neural_payload(
    model: SequenceLabeler, meta: dict[str, Any], data: dict[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    """What a neural checkpoint holds: format, version, model config, weights, ``meta``, the
    ``data`` section (:func:`describe_data`) and ``extra`` (the trainer's resume state)."""
    weights = {name: value.detach().cpu().clone() for name, value in model.state_dict().items()}
    module = _user_modules(model)
    return sealed(
        {
            "format": CHECKPOINT_FORMAT,
            "inn_version": _version(),
            "model_config": asdict(model.config),
            "state_dict": weights,
            "meta": meta,
            "data": data or {},
            **module,
            **extra,
        }
    )


def _user_modules(model: SequenceLabeler) -> dict[str, list[dict[str, str]]]:
    """What a checkpoint records of the modules of one's own its model needs
    (:func:`inn.user_modules.needed_by`; none for the package's models)."""
    spec = model.config.spec
    factory = CELLS[spec.cell].factory if spec.cell in CELLS else None
    modules = needed_by(model, spec.module, getattr(factory, "__module__", None))
    return {"model_modules": modules} if modules else {}


def perceptron_payload(
    peer: PerceptronPeer, meta: dict[str, Any], data: dict[str, Any] | None = None
) -> dict[str, Any]:
    """What a perceptron checkpoint holds: format, version, its weights, ``meta`` and ``data``."""
    return sealed(
        {
            "format": CHECKPOINT_FORMAT,
            "inn_version": _version(),
            "perceptron": peer.state(),
            "meta": meta,
            "data": data or {},
        }
    )


def save_perceptron(
    peer: PerceptronPeer, path: str | os.PathLike, meta: dict[str, Any], data: dict[str, Any] | None = None
) -> None:
    """Write a perceptron checkpoint (atomically)."""
    from inn.io import torch_save

    torch_save(perceptron_payload(peer, meta, data), path)


def read_checkpoint(path: str | os.PathLike, device: str | torch.device = "cpu") -> dict[str, Any]:
    """The stored dict of a checkpoint or tagger file of either kind, its layout checked.

    Loaded with ``weights_only=True``: a file that would need to run code to load is refused.

    Raises:
        InnError: the file is missing, unreadable (truncated, not a torch file), not an inn
            model file, or written by a newer inn in a layout this one cannot read.
    """
    if not os.path.isfile(path):
        raise InnError(_not_a_file(path))
    try:
        payload = torch_load_data(path, "give a model file inn wrote (checkpoint.pt or tagger.pt)", device)
    except InnError:
        raise
    except Exception as exc:  # empty, truncated or foreign
        raise InnError(
            f"cannot read checkpoint {path} ({torch_load_problem(path, exc)}): give a model file inn wrote "
            "(checkpoint.pt or tagger.pt), or train the model again"
        ) from None
    if not isinstance(payload, dict) or not ("model_config" in payload or "perceptron" in payload):
        raise InnError(f"{path} is not an inn model file (no model in it): give a checkpoint.pt or a tagger file")
    version = payload.get("format")
    if version not in READABLE_FORMATS:
        raise InnError(
            f"{path} was written by inn {payload.get('inn_version', '?')} in model file format "
            f"{version}, which inn {_version()} cannot read (formats {', '.join(map(str, READABLE_FORMATS))}): "
            "use the inn version that wrote it, or upgrade inn"
        )
    problem = weights_problem(payload, path)
    if problem is not None:
        raise InnError(f"{path}: {problem}; use an intact copy, or train (or export) the model again")
    return payload


def _not_a_file(path: str | os.PathLike) -> str:
    """Why ``path``, given as a model file, is none: a folder (naming the model files in it), or
    missing (naming close names beside it; "train the model first" only where the workflow
    puts a checkpoint, ``.../train/.../checkpoint.pt``)."""
    path = Path(path)
    if path.is_dir():
        inside = sorted(p.name for p in path.glob("*.pt") if p.is_file())
        found = f" (it holds {', '.join(inside)})" if inside else ""
        return (
            f"{path} is a folder, not a model file: give the file inside it{found}, e.g. "
            f"{path / 'checkpoint.pt'} or {path / 'tagger.pt'}"
        )
    if path.name == "checkpoint.pt" and "train" in path.parts:
        return f"checkpoint not found: {path} (train the model first)"
    parent = path.parent
    if not parent.is_dir():
        return f"model file not found: {path} (there is no folder {parent})"
    close = difflib.get_close_matches(path.name, [p.name for p in parent.iterdir()], n=3, cutoff=0.6)
    if close:
        return f"model file not found: {path} (did you mean {' or '.join(str(parent / c) for c in close)}?)"
    return f"model file not found: {path} (nothing of a close name in {parent})"


def model_from_payload(
    payload: dict[str, Any], path: str | os.PathLike, device: str | torch.device = "cpu"
) -> tuple[Any, dict]:
    """The model a payload (:func:`read_checkpoint`) describes, ready to evaluate: ``(model, meta)``.

    A perceptron gives a :class:`~inn.tagging.perceptron.PerceptronPeer`, a neural payload a
    :class:`~inn.models.SequenceLabeler` in eval mode on ``device``.

    Raises:
        InnError: the weights do not fit the configuration the payload names.
    """
    if "perceptron" in payload:
        from inn.tagging.perceptron import PerceptronPeer

        return PerceptronPeer.from_state(payload["perceptron"]), payload.get("meta", {})
    config = dict(payload["model_config"])
    config.setdefault("solver", "newton_krylov")  # stored since the first format; before, the only one
    modules = recorded(payload)
    if modules and config.get("kind") not in MODELS:
        raise missing_error(path, config.get("kind"), modules)
    cfg = ModelConfig(**config)
    model = build_model(cfg)
    try:
        model.load_state_dict(payload["state_dict"])
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[-1].strip()
        raise InnError(f"{path}: weights do not match the model configuration it names ({first})") from None
    return model.to(device).eval(), payload.get("meta", {})


def load_checkpoint(path: str | os.PathLike, device: str | torch.device = "cpu") -> tuple[Any, dict]:
    """Load a trained model of either kind: ``(model ready to evaluate, meta)``.

    ``meta`` holds the task, dataset, model name, seed, training settings and the epoch the
    weights come from.

    Raises:
        InnError: the file is missing, unreadable, or not a model file this inn reads.
    """
    return model_from_payload(read_checkpoint(path, device), path, device)


def self_contained(
    payload: dict[str, Any],
    path: str | os.PathLike,
    data_dir: str | os.PathLike | None = None,
    column: str | None = None,
) -> dict[str, Any]:
    """A POS payload as a tagger file: the resume state left out, the ``data`` section filled.

    A format-2 checkpoint already holds its vocabularies; ``data_dir`` is then optional and,
    when given, must be the data it was trained on. A format-1 checkpoint needs ``data_dir``,
    its prepared folder (``results/data/pos/<corpus>``), whose vocabularies must fit the model.

    Raises:
        InnError: not a POS model; no vocabularies and no ``data_dir``; ``data_dir`` is other data.
    """
    meta = payload.get("meta", {})
    task = meta.get("task", payload.get("model_config", {}).get("task", tagging_task()))
    if not getattr(TASKS.get(task), "tags", False):
        raise InnError(f"{path} is a {meta.get('task')} model, not a tagger: only POS models tag text")
    data = dict(payload.get("data") or {})
    if data_dir is not None:
        described = describe_data(data_dir, task, column or data.get("column"))
        if data.get("fingerprint") not in (None, described["fingerprint"]):
            raise InnError(
                f"{path} was trained on other data than {data_dir} (fingerprint {data['fingerprint']}, "
                f"the folder's {described['fingerprint']}): give the folder it was trained on"
            )
        _check_vocabularies(payload, described["vocabularies"], path, data_dir)
        # its own vocabularies where it has them (their word counts are those it trained on)
        data = {**described, **{k: v for k, v in data.items() if k in ("corpus", "vocabularies")}}
        data["dev_unseen"] = dev_unseen_share(data_dir, data["vocabularies"]["word_counts"])
    elif "vocabularies" not in data:
        raise InnError(
            f"{path} holds no feature vocabularies (written by inn before tagger files, format "
            f"{payload.get('format')}): convert it with `inn export-tagger --checkpoint {path} "
            "--data results/data/pos/<corpus> --out tagger.pt`"
        )
    if column is not None:
        data["column"] = column
    kept = {k: v for k, v in payload.items() if k not in TRAINER_STATE_KEYS}
    return {**kept, "format": CHECKPOINT_FORMAT, "inn_version": kept.get("inn_version", _version()), "data": data}


def _check_vocabularies(payload: dict[str, Any], vocabularies: dict, path, data_dir) -> None:
    """Refuse vocabularies of other sizes or another tag set than a neural model's."""
    tags = list(vocabularies["tags"])
    if "model_config" in payload:
        cfg = payload["model_config"]
        sizes = (len(vocabularies["words"]), [len(v) for v in vocabularies["affixes"].values()], len(tags))
        if (cfg["word_vocab"], list(cfg["affix_vocab"]), cfg["num_classes"]) != tuple(sizes):
            raise InnError(
                f"{path} was trained with other feature vocabularies than {data_dir} (words/affixes/tags "
                f"{cfg['word_vocab']}/{list(cfg['affix_vocab'])}/{cfg['num_classes']}, data "
                f"{sizes[0]}/{sizes[1]}/{sizes[2]}): give the folder it was trained on"
            )
    trained = payload.get("meta", {}).get("tags")
    if trained is not None and list(trained) != tags:
        raise InnError(f"{path} was trained with another tag set than {data_dir}: give the folder it was trained on")


def weights_digest(payload: dict[str, Any]) -> str:
    """The SHA-256 (hex) of a payload's weights, whatever the file around them says: for a neural
    model over its ``state_dict`` tensors by name (name, dtype, shape and bytes of each), for the
    perceptron over its weights as canonical JSON. ``inn evaluate`` writes it into metrics.json
    and a tagger file keeps it beside its test score, which so stays bound to the weights it
    scored: another run's metrics.json (another hidden size, a run started again) is refused."""
    digest = hashlib.sha256()
    if "perceptron" in payload:
        digest.update(json.dumps(payload["perceptron"], sort_keys=True, separators=(",", ":")).encode())
        return digest.hexdigest()
    for name in sorted(payload["state_dict"]):
        tensor = payload["state_dict"][name].detach().cpu().contiguous()
        digest.update(f"{name}\0{str(tensor.dtype).removeprefix('torch.')}\0{tuple(tensor.shape)}\0".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def check_scores_bound(
    payload: dict[str, Any], metrics: dict[str, Any], model_path: str | os.PathLike, metrics_path: str | os.PathLike
) -> None:
    """Refuse a metrics.json that scored other weights than ``payload``'s (:func:`weights_digest`).
    One written before metrics carried the digest is accepted, with a warning.

    Raises:
        InnError: the digests differ (naming both files).
    """
    scored = metrics.get("weights_sha256")
    if scored is None:
        log.warning(
            "%s was written before metrics named the weights they score: cannot check that it scores %s",
            metrics_path,
            model_path,
        )
        return
    if scored != weights_digest(payload):
        raise InnError(
            f"{metrics_path} scores other weights (sha256 {scored[:16]}...) than {model_path} holds "
            f"({weights_digest(payload)[:16]}...; another run or a model trained again): give the "
            "metrics.json that inn evaluate wrote for this model"
        )


def with_test_scores(payload: dict[str, Any], metrics: dict[str, Any]) -> dict[str, Any]:
    """``payload`` with the test scores of ``metrics`` (``inn evaluate``'s metrics.json) in its
    meta, and the digest of the weights they scored (:func:`weights_digest`) where it names one."""
    keys = ("accuracy", "unseen_accuracy", "tokens", "unseen_tokens", "sentences", "split", "weights_sha256")
    meta = {**payload.get("meta", {}), "test": {k: metrics.get(k) for k in keys}}
    return {**payload, "meta": meta}


def save_payload(payload: dict[str, Any], path: str | os.PathLike) -> None:
    """Write a payload (a tagger file) atomically, with the digest of its weights."""
    from inn.io import torch_save

    torch_save(sealed(payload), path)


def sealed(payload: dict[str, Any]) -> dict[str, Any]:
    """``payload`` with the digest of its own weights (:data:`OWN_DIGEST`), which every read
    checks (:func:`weights_problem`); call it on what was read and checked, or just made."""
    return {**payload, OWN_DIGEST: weights_digest(payload)}


def weights_problem(payload: dict[str, Any], path: str | os.PathLike, finite: bool = True) -> str | None:
    """Why the weights of a model file or resume state read from ``path`` must not be used, in
    words for a message, or None: they no longer match the digest written with them (bytes
    damaged or altered since: torch's own reader does not notice), or, with ``finite``, a
    neural model's are not finite (NaN or inf: every tag would be empty; a resume state's are
    left to training, whose first loss names them). A file written before the digest existed
    is used, with a warning that it could not be checked."""
    stored = payload.get(OWN_DIGEST)
    if stored is None:
        log.warning(
            "%s was written before model files carried the digest of their own weights: cannot check "
            "that they are undamaged",
            path,
        )
    else:
        actual = weights_digest(payload)
        if stored != actual:
            return (
                f"its weights are damaged or were altered (they hash to sha256 {actual[:16]}..., the file "
                f"was saved with {stored[:16]}...)"
            )
    weights = (payload.get("state_dict") or {}) if finite else {}
    bad = [
        name
        for name, tensor in weights.items()
        if torch.is_tensor(tensor) and tensor.is_floating_point() and not torch.isfinite(tensor).all()
    ]
    if bad:
        return (
            f"its weights are not finite ({len(bad)} of {len(weights)} tensors hold NaN or inf values, first "
            f"{bad[0]}): a model that cannot tag"
        )
    return None
