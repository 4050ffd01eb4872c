"""The sequence labellers of the paper's experiments, in one file (nanoGPT style).

Every model is ``encoder -> recurrent layer -> per-position output``:

- the encoder turns a batch into the input vectors xi (B, n, rnn_input_size): for POS the
  feature embeddings of paper 3.2 (word, six affixes, eight shape bits; :class:`FeatureEncoder`),
  for random walks the raw steps (:class:`WalkEncoder`);
- the recurrent layer is the implicit GRU (:class:`inn.nn.ImplicitGRU`), the implicit LSTM
  (:class:`inn.nn.ImplicitLSTM`, the paper's future work) or one of the explicit baselines GRU,
  LSTM, BiGRU, BiLSTM (:class:`ExplicitRNN`); ``hidden_states(xi, mask)`` runs it alone, which
  is what the paper times;
- the output is a softmax over tags (POS) or a logistic unit per step (walks), as the task's
  record says (:data:`inn.registry.TASKS`).

Model names as the workflow spells them are the keys of the registry :data:`MODELS` (``inn``,
``inn_lstm``, ``gru``, ``lstm``, ``bigru``, ``bilstm``, ``perceptron``), the neural ones optionally
with a size, ``bilstm-h300`` (the b-LSTM sweep of paper 3.1). Each neural model names its
recurrent cell in the registry :data:`CELLS` (``implicit_gru``, ``implicit_lstm``, ``gru``,
``lstm``). A cell of one's own is one :func:`register_cell` call, a model on it one
:func:`register` call, in a module of one's own that the workflow config names under
``imports`` (docs/implicit-layer.md, "Your cell in the experiments"). The models the paper's
claims are about are found by their role (:data:`ROLES`, :func:`model_with_role`): the INN is
the ``claimed`` model, the b-LSTM the ``swept`` baseline, the BiGRU the ``timing_reference``.
The registries live in :mod:`inn.registry`; their names are re-exported here.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from inn.data.features import feature_size
from inn.errors import InnError

log = logging.getLogger(__name__)

from inn.registry import (  # noqa: F401  (the registries' names, re-exported: inn.models.MODELS ...)
    BUILTIN_CELLS,
    BUILTIN_MODELS,
    CELLS,
    FEATURES,
    MODELS,
    ROLES,
    TASKS,
    CellSpec,
    ModelSpec,
    TaskSpec,
    base_name,
    bidirectional_baselines,
    implicit_models,
    model_with_role,
    neural_models,
    paper_baselines,
    paper_task,
    parse_model_name,
    register,
    register_cell,
    task_spec,
)


@dataclass
class ModelConfig:
    """Everything needed to rebuild a model (stored in its checkpoint)."""

    task: str  # "pos" (softmax over tags) or "walks" (logistic unit per step)
    kind: str  # a neural model of the registry (MODELS)
    hidden_size: int  # per direction for the explicit baselines; k for the implicit layers
    num_classes: int  # tags (pos) or 2 (walks: one logistic unit)
    # POS encoder: vocabulary sizes and embedding widths (paper: 39,002 / 2,002 / 320 / 20)
    word_vocab: int = 0
    affix_vocab: tuple[int, ...] = ()  # six vocabularies: prefix2..4, suffix2..4
    word_dim: int = 320
    affix_dim: int = 20
    num_shapes: int = 8
    # walks encoder: the walk dimension d
    input_dim: int = 0
    dropout: float = 0.0  # on xi and on H during training (0: none, as in the paper)
    # the implicit layer: solver name and options (inn.solvers.solve, backward_* options)
    solver: str = "anderson"  # the workflow's (inn.solvers.SOLVERS); checkpoints store theirs
    solver_options: dict[str, Any] = field(default_factory=dict)
    trainable_boundary: bool = False
    forget_max: float = 1.0  # the implicit LSTM's forget gate cap (1: none, the cell as defined)

    def __post_init__(self) -> None:
        task_spec(self.task)
        if self.kind not in neural_models():
            raise InnError(
                f"unknown model kind {self.kind!r}; use one of {', '.join(neural_models())}, or import "
                "the module that registers it (--import MODULE; the workflow config's imports)"
            )
        if self.hidden_size < 1:
            raise InnError(f"hidden_size must be positive, got {self.hidden_size}")
        if self.forget_max != 1.0 and self.spec.cell != "implicit_lstm":
            raise InnError(f"forget_max caps the implicit LSTM's forget gate; model {self.kind} has none")
        if not self.implicit and (self.solver_options or self.trainable_boundary):
            raise InnError(
                f"model {self.kind} has no implicit layer: solver_options and trainable_boundary apply "
                f"to {', '.join(implicit_models())} only; leave them out"
            )
        self.affix_vocab = tuple(self.affix_vocab)

    @property
    def spec(self) -> ModelSpec:
        return MODELS[self.kind]

    @property
    def task_spec(self) -> TaskSpec:
        return task_spec(self.task)

    @property
    def bidirectional(self) -> bool:
        return self.spec.bidirectional

    @property
    def implicit(self) -> bool:
        """Is the recurrent layer implicit (solved)?"""
        return self.spec.implicit


# --------------------------------------------------------------------------- encoders


class FeatureEncoder(nn.Module):
    """Paper 3.2: xi_t = [word emb (320); 6 affix embs (6 x 20); 8 binary shape features]."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        if cfg.word_vocab < 2 or len(cfg.affix_vocab) != 6:
            raise InnError("a POS model needs the word vocabulary size and six affix vocabulary sizes")
        self.words = nn.Embedding(cfg.word_vocab, cfg.word_dim, padding_idx=0)
        self.affixes = nn.ModuleList(nn.Embedding(v, cfg.affix_dim, padding_idx=0) for v in cfg.affix_vocab)
        self.output_size = feature_size(cfg.word_dim, cfg.affix_dim)

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        parts = [self.words(batch["words"])]  # (B, n, word_dim)
        parts += [emb(batch["affixes"][..., i]) for i, emb in enumerate(self.affixes)]  # 6 x (B, n, affix_dim)
        parts.append(batch["shapes"])  # (B, n, 8)
        return torch.cat(parts, dim=-1)  # (B, n, 448)


class WalkEncoder(nn.Module):
    """Paper 3.1: xi_t is the walk's position x_t itself (d numbers)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        if cfg.input_dim < 1:
            raise InnError("a walks model needs input_dim, the walk dimension d")
        self.output_size = cfg.input_dim

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        return batch["x"]  # (B, n, d)


#: the input encoders by the name a task's record gives (:attr:`TaskSpec.encoder`)
ENCODERS: dict[str, Callable[[ModelConfig], nn.Module]] = {"features": FeatureEncoder, "steps": WalkEncoder}


# --------------------------------------------------------------------------- recurrent layers


class ExplicitRNN(nn.Module):
    """An explicit cell's layer (torch's GRU/LSTM), one layer, uni- or bidirectional, on left-aligned padded batches.

    Padding sits after each sequence's last token, so the forward direction is unaffected by
    it; the backward direction runs the same way on every sequence reversed within its own
    length (cheaper on CPU than packed sequences, and exact). Padded outputs are zero, as the
    implicit layer's are.
    """

    def __init__(
        self, input_size: int, hidden_size: int, rnn: Callable[[int, int], nn.Module], bidirectional: bool
    ) -> None:
        super().__init__()
        self.forward_rnn = rnn(input_size, hidden_size)  # an explicit cell's factory (CellSpec)
        self.backward_rnn = rnn(input_size, hidden_size) if bidirectional else None
        self.output_size = hidden_size * (2 if bidirectional else 1)

    def forward(self, xi: Tensor, mask: Tensor, start: Tensor | None = None) -> Tensor:
        """``start`` is ignored: an explicit layer has no equations to solve (the implicit
        layer takes it as a warm start)."""
        H, _ = self.forward_rnn(xi)  # (B, n, hidden)
        if self.backward_rnn is not None:
            flip = reverse_index(mask)  # (B, n)
            gather = flip.unsqueeze(-1)
            Hb, _ = self.backward_rnn(xi.gather(1, gather.expand_as(xi)))
            H = torch.cat([H, Hb.gather(1, gather.expand_as(Hb))], dim=-1)  # (B, n, 2 x hidden)
        return H * mask.unsqueeze(-1).to(H.dtype)


def reverse_index(mask: Tensor) -> Tensor:
    """(B, n) positions that reverse each sequence within its length (padding stays put)."""
    n = mask.shape[1]
    t = torch.arange(n, device=mask.device).expand_as(mask)
    lengths = mask.sum(1, keepdim=True)
    return torch.where(t < lengths, lengths - 1 - t, t)


def recurrent_layer(cfg: ModelConfig, input_size: int) -> nn.Module:
    """The model's hidden layer from its cell (:data:`CELLS`): an implicit layer solved with
    the config's solver, or an explicit baseline; ``output_size`` is its output width."""
    spec = cfg.spec
    cell = CELLS.get(spec.cell) if spec.cell is not None else None
    if cell is None:
        raise InnError(
            f"model {cfg.kind}: unknown cell {spec.cell!r}; use one of {', '.join(CELLS)} (register_cell adds one)"
        )
    if not cell.implicit:
        return ExplicitRNN(input_size, cfg.hidden_size, cell.factory, spec.bidirectional)
    from inn.nn import ImplicitSequence

    options = dict(cfg.solver_options)
    if spec.cell == "implicit_lstm":
        options["forget_max"] = cfg.forget_max
    if cell.layer:
        layer = cell.factory(
            input_size, cfg.hidden_size, solver=cfg.solver, trainable_boundary=cfg.trainable_boundary, **options
        )
        layer.output_size = cfg.hidden_size
        return layer
    unit = cell.factory(input_size, cfg.hidden_size)
    state_size = getattr(unit, "state_size", cfg.hidden_size)
    return ImplicitSequence(
        unit, state_size, solver=cfg.solver, trainable_boundary=cfg.trainable_boundary, input_size=input_size, **options
    )


# --------------------------------------------------------------------------- the labeller


class SequenceLabeler(nn.Module):
    """encoder -> recurrent layer -> linear output, for one task.

    ``forward(batch)`` returns logits: (B, n, num_classes) for POS, (B, n) for walks (the
    logit of label 1). ``batch`` is a dict of padded tensors with a ``mask`` (B, n), True on
    real tokens: ``words``/``affixes``/``shapes`` (POS) or ``x`` (walks). ``forward(batch,
    start)`` hands ``start`` to the recurrent layer: the INN's warm start (the trainer's
    :class:`inn.experiment.train.warm_starts.WarmStarts`), ignored by the explicit baselines.
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.config = cfg
        self.encoder = ENCODERS[cfg.task_spec.encoder](cfg)
        self.rnn = recurrent_layer(cfg, self.encoder.output_size)
        self.dropout = nn.Dropout(cfg.dropout)
        self.output = nn.Linear(self.rnn.output_size, cfg.task_spec.output_width(cfg.num_classes))

    @property
    def rnn_input_size(self) -> int:
        """Width of xi, what :meth:`hidden_states` takes."""
        return self.encoder.output_size

    def hidden_states(self, xi: Tensor, mask: Tensor, start: Tensor | None = None) -> Tensor:
        """The recurrent layer alone: xi (B, n, rnn_input_size), mask (B, n) -> H (B, n, out);
        ``start``: the implicit layer's warm start (B, n, state width), ignored by the
        explicit layers."""
        return self.rnn(xi, mask.bool(), start)

    def forward(self, batch: dict[str, Tensor], start: Tensor | None = None) -> Tensor:
        mask = batch["mask"]
        xi = self.dropout(self.encoder(batch))  # (B, n, rnn_input_size)
        H = self.dropout(self.hidden_states(xi, mask, start))  # (B, n, hidden or 2 x hidden)
        logits = self.output(H)  # (B, n, classes) or (B, n, 1)
        return logits if self.config.task_spec.tags else logits.squeeze(-1)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad)


def build_model(cfg: ModelConfig) -> SequenceLabeler:
    """The model ``cfg`` describes, its weights initialised on the CPU.

    Raises:
        InnError: its weights would not fit in the memory available (measured on a weightless
            copy first, so that ``hidden_size: 10000000`` is one line, not the allocator's
            traceback or a machine that swaps), or the allocator failed all the same.
    """
    need = _weight_bytes(cfg)
    available = available_memory()
    if need is not None and available is not None and need > available:
        raise InnError(
            f"model {cfg.kind} with hidden_size {cfg.hidden_size}: its weights alone take "
            f"{need / 2**30:,.1f} GiB, more than the {available / 2**30:,.1f} GiB of memory available; "
            "choose a smaller hidden_size"
        )
    try:
        return SequenceLabeler(cfg)
    except (MemoryError, RuntimeError) as exc:
        if isinstance(exc, RuntimeError) and "alloc" not in str(exc):
            raise
        raise InnError(
            f"model {cfg.kind} with hidden_size {cfg.hidden_size}: its weights do not fit in memory "
            f"({_short(exc)}); choose a smaller hidden_size"
        ) from None


def _weight_bytes(cfg: ModelConfig) -> int | None:
    """Bytes of the weights of the model ``cfg`` describes, counted on the meta device (no
    memory taken); None where a cell cannot be built there."""
    try:
        with torch.device("meta"):
            shape = SequenceLabeler(cfg)
    except Exception:  # a user's cell that needs real tensors to build: the allocator decides
        return None
    return sum(p.numel() * p.element_size() for p in shape.parameters())


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation (``MemAvailable`` of ``/proc/meminfo``,
    else the physical memory); None where neither can be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def _short(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


# --------------------------------------------------------------------------- prediction


@torch.no_grad()
def predict(
    model: SequenceLabeler,
    examples: list[dict[str, Tensor]],
    batch_size: int = 20,
    device: str | torch.device = "cpu",
    progress: bool = False,
) -> tuple[list[Tensor], list[Tensor | None], int]:
    """Run ``model`` over encoded ``examples`` (:mod:`inn.batches`) in batches of similar length.

    The batches are those of evaluation (sorted by length, ``batch_size`` at a time), so the
    same sentences give the same batches, and the same tags, wherever they are predicted
    (``inn evaluate``, ``inn tag``, :class:`inn.tagging.tagger.Tagger`). No autograd graph is built.

    Returns:
        Per example, in input order: the predicted labels (tag indices, or 0/1 per walk step),
        for walks the probability of label 1 (else None); and the number of sequences whose
        implicit solve missed its tolerance (counted, never silent).
    """
    from tqdm import tqdm

    from inn import batches as B
    from inn.solvers import ConvergenceWarning

    model.eval()
    labels: list[Tensor | None] = [None] * len(examples)
    probs: list[Tensor | None] = [None] * len(examples)
    failed = 0
    order = B.make_batches([B.length(e) for e in examples], batch_size)
    bar = tqdm(order, desc="tagging", unit="batch", disable=not progress, mininterval=1.0, leave=False)
    for index in bar:
        batch = B.to_device(B.collate([examples[i] for i in index]), torch.device(device))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)  # counted, and reported by the caller
            logits = model(batch).cpu()
        stats = getattr(model.rnn, "last_stats", None)
        failed += stats.num_failed if stats is not None else 0
        lengths = batch["mask"].sum(1).tolist()
        if model.config.task_spec.tags:
            best = logits.argmax(-1)  # (B, n)
            for row, i in enumerate(index):
                labels[i] = best[row, : lengths[row]]
        else:
            for row, i in enumerate(index):
                probs[i] = torch.sigmoid(logits[row, : lengths[row]])
                labels[i] = (logits[row, : lengths[row]] > 0).long()
    bar.close()
    if failed:
        log.warning("%d sequence solve(s) did not converge", failed)
    return labels, probs, failed
