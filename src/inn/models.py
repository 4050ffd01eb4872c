"""The sequence labellers of the paper's experiments, in one file (nanoGPT style).

Every model is ``encoder -> recurrent layer -> per-position output``:

- the encoder turns a batch into the input vectors xi (B, n, rnn_input_size): for POS the
  feature embeddings of paper 3.2 (word, six affixes, eight shape bits; :class:`FeatureEncoder`),
  for random walks the raw steps (:class:`WalkEncoder`);
- the recurrent layer is the implicit GRU (:class:`inn.nn.ImplicitGRU`), the implicit LSTM
  (:class:`inn.nn.ImplicitLSTM`, the paper's future work) or one of the explicit baselines GRU,
  LSTM, BiGRU, BiLSTM (:class:`ExplicitRNN`); ``hidden_states(xi, mask)`` runs it alone, which
  is what the paper times;
- the output is a softmax over tags (POS) or a logistic unit per step (walks).

Model names as the workflow spells them are the keys of the registry :data:`MODELS` (``inn``,
``inn_lstm``, ``gru``, ``lstm``, ``bigru``, ``bilstm``, ``perceptron``), the neural ones optionally
with a size, ``bilstm-h300`` (the b-LSTM sweep of paper 3.1). Each neural model names its
recurrent cell in the registry :data:`CELLS` (``implicit_gru``, ``implicit_lstm``, ``gru``,
``lstm``). A cell of one's own is one :func:`register_cell` call, a model on it one
:func:`register` call, in a module of one's own that the workflow config names under
``imports`` (docs/implicit-layer.md, "Your cell in the experiments"). The models the paper's
claims are about are found by their role (:data:`ROLES`, :func:`model_with_role`): the INN is
the ``claimed`` model, the b-LSTM the ``swept`` baseline, the BiGRU the ``timing_reference``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from inn.errors import InnError

log = logging.getLogger(__name__)

TASKS = ("pos", "walks")
#: the hidden-size rule's word for the input feature size (the paper's k = 448 for POS)
FEATURES = "features"


@dataclass(frozen=True)
class CellSpec:
    """A recurrent cell the models may name (:attr:`ModelSpec.cell`), and how its layer is built.

    ``factory(input_size, hidden_size)`` returns:

    - for an implicit cell (``implicit=True``), the cell itself: an ``nn.Module`` with
      ``forward(x, h_prev, h_next) -> h`` (:class:`inn.nn.Cell`), which the model wraps in
      :class:`inn.nn.ImplicitSequence` with the run's solver and options. The solved state is
      ``hidden_size`` wide unless the cell has a ``state_size`` attribute (the LSTM's [h; c]);
    - for an explicit cell, a one-directional layer run like ``torch.nn.GRU(...,
      batch_first=True)``: ``forward(x) -> (H, anything)``, (B, n, input_size) -> (B, n,
      hidden_size); :class:`ExplicitRNN` runs a second one on the reversed sequences for a
      bidirectional model.

    ``layer=True`` marks an implicit cell whose factory builds the whole layer,
    ``factory(input_size, hidden_size, solver=..., trainable_boundary=..., **options)``
    (the implicit GRU and LSTM: their parameters keep the names of their checkpoints).
    """

    name: str
    factory: Callable[..., nn.Module]
    implicit: bool
    layer: bool = False


#: every recurrent cell a model may name, by name
CELLS: dict[str, CellSpec] = {}
#: the package's own cells and models, which no registration replaces (set once they are registered)
BUILTIN_CELLS: frozenset[str] = frozenset()
BUILTIN_MODELS: frozenset[str] = frozenset()


def _refuse_builtin(kind: str, name: str, builtins: frozenset[str]) -> None:
    if name in builtins:
        raise InnError(f"{kind} {name} is the package's own and cannot be replaced: register yours under another "
                       f"name (e.g. my_{name})")


def register_cell(name: str, factory: Callable[..., nn.Module], implicit: bool = True,
                  layer: bool = False) -> CellSpec:
    """Add a recurrent cell that models may name (replacing one of one's own of the same name,
    never one of the package's); see :class:`CellSpec` for what ``factory`` returns.

    Example, a cell of one's own as an implicit layer::

        register_cell("ncgated", NonCausalGatedCell)           # (input_size, hidden_size) -> Cell
        register(ModelSpec("ncgated", "Non-causal gated", "ncgated", bidirectional=True,
                           implicit=True, sizes={"walks": ("inn_hidden_size",)}))
    """
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        raise InnError(f"cell name {name!r}: use lower-case letters, digits and _")
    _refuse_builtin("cell", name, BUILTIN_CELLS)
    if not callable(factory):
        raise InnError(f"cell {name}: the factory must be callable (input_size, hidden_size) -> module, "
                       f"got {type(factory).__name__}")
    spec = CellSpec(name, factory, bool(implicit), bool(layer))
    CELLS[name] = spec
    return spec


def _explicit(rnn: type[nn.Module]) -> Callable[[int, int], nn.Module]:
    def factory(input_size: int, hidden_size: int) -> nn.Module:
        return rnn(input_size, hidden_size, batch_first=True)

    factory.__name__ = factory.__qualname__ = rnn.__name__
    return factory


def _implicit_gru(input_size: int, hidden_size: int, **options: Any) -> nn.Module:
    from inn.nn import ImplicitGRU

    return ImplicitGRU(input_size, hidden_size, **options)


def _implicit_lstm(input_size: int, hidden_size: int, **options: Any) -> nn.Module:
    from inn.nn import ImplicitLSTM

    return ImplicitLSTM(input_size, hidden_size, **options)


register_cell("implicit_gru", _implicit_gru, implicit=True, layer=True)
register_cell("implicit_lstm", _implicit_lstm, implicit=True, layer=True)
register_cell("gru", _explicit(nn.GRU), implicit=False)
register_cell("lstm", _explicit(nn.LSTM), implicit=False)


@dataclass(frozen=True)
class ModelSpec:
    """One model of the experiments: everything the config, the workflow's rules, the tables,
    the report and the benchmark know of it. Adding a model to the experiments is one
    :func:`register` call (or one entry below).

    ``cell`` names the recurrent cell of :data:`CELLS` that :func:`recurrent_layer` builds
    (``implicit_gru``, ``implicit_lstm``, ``gru``, ``lstm``, or one registered by
    :func:`register_cell`); ``implicit`` must say what the cell is. None marks a model that
    is not a neural sequence labeller (the averaged perceptron). ``sizes`` is the hidden-size
    rule per task: the keys under ``models.<task>`` in the config tried in order, the first one
    set wins, and :data:`FEATURES` stands for the input feature size; a list-valued key (the
    b-LSTM's ``bilstm_hidden_sizes``) is a sweep, one run per size (``bilstm-h300``). A task
    without a rule is one the model is not trained on.

    ``role`` is the part the model plays in the paper's claims (:data:`ROLES`; one model each):
    the tables, the verdicts, the report, the timing and the benchmark find the paper's INN, its
    swept b-LSTM and the timing reference through it (:func:`model_with_role`), never by name.
    A model without a role (the implicit LSTM, one of one's own) still gets its columns in Table
    1, its rows in Table 2, its comparisons, its timing and its place in the report; the
    verdicts stay the paper's claims. ``short`` is its name in a table's header (the display
    name where unset), ``colour`` its colour in the report's figures (a matplotlib colour; the
    next free one where unset).
    """

    name: str
    display: str
    cell: str | None
    bidirectional: bool = False
    implicit: bool = False
    sizes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    in_paper: bool = True
    #: the module that registered it (set by :func:`register`): what a checkpoint of the model
    #: names, so that loading it without that module says which one to import
    module: str | None = field(default=None, compare=False)
    role: str | None = None
    short: str | None = None
    colour: str | None = None

    @property
    def tasks(self) -> tuple[str, ...]:
        return tuple(task for task in TASKS if task in self.sizes)

    @property
    def label(self) -> str:
        """The model's name in a table's header: ``short``, else ``display``."""
        return self.short or self.display


#: the parts a model plays in the paper's claims (:attr:`ModelSpec.role`), one model each
ROLES = {
    "claimed": "the paper's model, the INN: the verdicts' side, Table 1's first columns with the paper's "
               "figures beside them, the timing law the paper fitted, the layer the benchmark solves",
    "swept": "the paper's swept baseline, the b-LSTM: Table 1's last columns, one run per size, the size "
             "best on dev and the size nearest the claimed model's parameter count",
    "timing_reference": "the baseline the benchmark's times are divided by, the BiGRU",
}


#: every model of the experiments, by the name the config and the result paths use, in the
#: paper's order (Table 2's row order)
MODELS: dict[str, ModelSpec] = {}


def register(spec: ModelSpec) -> ModelSpec:
    """Add a model to the experiments (replacing one of one's own of the same name: a module
    imported again).

    Raises:
        InnError: a name that cannot be a path part or is one of the package's models, a cell
            that is not registered (register it first with :func:`register_cell`), or
            ``implicit`` not saying what the cell is.
    """
    if not re.fullmatch(r"[a-z][a-z0-9_]*", spec.name):
        raise InnError(f"model name {spec.name!r}: use lower-case letters, digits and _ (it is a path part)")
    _refuse_builtin("model", spec.name, BUILTIN_MODELS)
    if spec.cell is not None:
        cell = CELLS.get(spec.cell)
        if cell is None:
            raise InnError(f"model {spec.name}: unknown cell {spec.cell!r}; register it first with "
                           f"inn.models.register_cell, or use one of {', '.join(CELLS)}")
        if cell.implicit != spec.implicit:
            raise InnError(f"model {spec.name}: cell {spec.cell} is {'implicit' if cell.implicit else 'explicit'}; "
                           f"set implicit={cell.implicit} in its ModelSpec")
    if spec.role is not None:
        if spec.role not in ROLES:
            raise InnError(f"model {spec.name}: unknown role {spec.role!r}; use one of {', '.join(ROLES)}, or None")
        holder = next((name for name, other in MODELS.items() if other.role == spec.role), spec.name)
        if holder != spec.name:
            raise InnError(f"model {spec.name}: the role {spec.role} is {holder}'s ({ROLES[spec.role]}); a role "
                           "is one model's, and a model of one's own needs none to appear in the tables")
    if spec.module is None:
        caller = sys._getframe(1).f_globals
        spec = dataclasses.replace(spec, module=caller.get("__file__") if caller.get("__name__") == "__main__"
                                   else caller.get("__name__"))
    MODELS[spec.name] = spec
    return spec


_BASELINE = {"pos": ("baseline_hidden_size",)}
for _spec in (
    ModelSpec("gru", "GRU", "gru", sizes=_BASELINE),
    ModelSpec("lstm", "LSTM", "lstm", sizes=_BASELINE),
    ModelSpec("bigru", "Bidirectional GRU", "gru", bidirectional=True, sizes=_BASELINE, role="timing_reference",
              short="BiGRU"),
    ModelSpec("bilstm", "b-LSTM", "lstm", bidirectional=True,
              sizes={"pos": ("baseline_hidden_size",), "walks": ("bilstm_hidden_sizes",)}, role="swept", colour="C1"),
    ModelSpec("inn", "INN", "implicit_gru", bidirectional=True, implicit=True,
              sizes={"pos": ("inn_hidden_size", FEATURES), "walks": ("inn_hidden_size",)}, role="claimed",
              colour="C0"),
    ModelSpec("inn_lstm", "Implicit LSTM (ours, not in the paper)", "implicit_lstm", bidirectional=True,
              implicit=True, in_paper=False,
              sizes={task: ("inn_lstm_hidden_size", "inn_hidden_size", FEATURES) for task in TASKS},
              short="implicit LSTM", colour="C2"),
    ModelSpec("perceptron", "Averaged perceptron (NLTK)", None, in_paper=False, sizes={"pos": ()}),
):
    register(_spec)
BUILTIN_CELLS, BUILTIN_MODELS = frozenset(CELLS), frozenset(MODELS)


def neural_models() -> list[str]:
    """The registry's neural sequence labellers (what ``inn train --model`` accepts)."""
    return [name for name, spec in MODELS.items() if spec.cell is not None]


def implicit_models() -> list[str]:
    """The models whose layer is implicit (solved: solver options, warm starts, statistics)."""
    return [name for name, spec in MODELS.items() if spec.implicit]


def model_with_role(role: str) -> str:
    """The registry's name of the model that plays ``role`` (:data:`ROLES`): ``"claimed"`` ->
    ``"inn"``, ``"swept"`` -> ``"bilstm"``, ``"timing_reference"`` -> ``"bigru"``."""
    for name, spec in MODELS.items():
        if spec.role == role:
            return name
    if role not in ROLES:
        raise InnError(f"unknown model role {role!r}; use one of {', '.join(ROLES)}")
    raise InnError(f"no model of the registry plays the role {role} ({ROLES[role]}): inn.models.MODELS was "
                   "changed by hand; add models with inn.models.register")


def paper_baselines() -> list[str]:
    """The baselines of the paper's Table 2 claim, the INN's accuracy above theirs: its
    bidirectional explicit models (``bigru``, ``bilstm``)."""
    return [name for name, spec in MODELS.items()
            if spec.in_paper and spec.bidirectional and not spec.implicit and spec.cell is not None]


def bidirectional_baselines() -> dict[str, str]:
    """Each cell's bidirectional explicit model (``{"gru": "bigru", "lstm": "bilstm"}``): what
    an implicit layer of that cell is timed and compared against."""
    return {spec.cell: name for name, spec in MODELS.items()
            if spec.cell is not None and spec.bidirectional and not spec.implicit}


_NAME = re.compile(r"^(?P<kind>[a-z][a-z0-9_]*)(?:-h(?P<hidden>\d+))?$")


def base_name(name: str) -> str:
    """The registry's name of a run's model: ``"bilstm-h300"`` -> ``"bilstm"``, ``"perceptron"`` as is."""
    return re.sub(r"-h\d+$", "", name)


def parse_model_name(name: str) -> tuple[str, int | None]:
    """``"bilstm-h300"`` -> ``("bilstm", 300)``; ``"inn"`` -> ``("inn", None)``."""
    match = _NAME.match(name)
    if not match or match["kind"] not in neural_models():
        raise InnError(f"unknown model {name!r}: use one of {', '.join(neural_models())}, "
                       "optionally with a size (bilstm-h300)")
    hidden = match["hidden"]
    return match["kind"], (int(hidden) if hidden else None)


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
        if self.task not in TASKS:
            raise InnError(f"unknown task {self.task!r}; use one of {', '.join(TASKS)}")
        if self.kind not in neural_models():
            raise InnError(f"unknown model kind {self.kind!r}; use one of {', '.join(neural_models())}, or import "
                           "the module that registers it (--import MODULE; the workflow config's imports)")
        if self.hidden_size < 1:
            raise InnError(f"hidden_size must be positive, got {self.hidden_size}")
        if self.forget_max != 1.0 and self.spec.cell != "implicit_lstm":
            raise InnError(f"forget_max caps the implicit LSTM's forget gate; model {self.kind} has none")
        if not self.implicit and (self.solver_options or self.trainable_boundary):
            raise InnError(f"model {self.kind} has no implicit layer: solver_options and trainable_boundary apply "
                           f"to {', '.join(implicit_models())} only; leave them out")
        self.affix_vocab = tuple(self.affix_vocab)

    @property
    def spec(self) -> ModelSpec:
        return MODELS[self.kind]

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
        self.output_size = cfg.word_dim + 6 * cfg.affix_dim + cfg.num_shapes

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


# --------------------------------------------------------------------------- recurrent layers


class ExplicitRNN(nn.Module):
    """An explicit cell's layer (torch's GRU/LSTM), one layer, uni- or bidirectional, on left-aligned padded batches.

    Padding sits after each sequence's last token, so the forward direction is unaffected by
    it; the backward direction runs the same way on every sequence reversed within its own
    length (cheaper on CPU than packed sequences, and exact). Padded outputs are zero, as the
    implicit layer's are.
    """

    def __init__(self, input_size: int, hidden_size: int, rnn: Callable[[int, int], nn.Module],
                 bidirectional: bool) -> None:
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
        raise InnError(f"model {cfg.kind}: unknown cell {spec.cell!r}; use one of {', '.join(CELLS)} "
                       "(register_cell adds one)")
    if not cell.implicit:
        return ExplicitRNN(input_size, cfg.hidden_size, cell.factory, spec.bidirectional)
    from inn.nn import ImplicitSequence

    options = dict(cfg.solver_options)
    if spec.cell == "implicit_lstm":
        options["forget_max"] = cfg.forget_max
    if cell.layer:
        layer = cell.factory(input_size, cfg.hidden_size, solver=cfg.solver,
                             trainable_boundary=cfg.trainable_boundary, **options)
        layer.output_size = cfg.hidden_size
        return layer
    unit = cell.factory(input_size, cfg.hidden_size)
    state_size = getattr(unit, "state_size", cfg.hidden_size)
    return ImplicitSequence(unit, state_size, solver=cfg.solver, trainable_boundary=cfg.trainable_boundary,
                            input_size=input_size, **options)


# --------------------------------------------------------------------------- the labeller


class SequenceLabeler(nn.Module):
    """encoder -> recurrent layer -> linear output, for one task.

    ``forward(batch)`` returns logits: (B, n, num_classes) for POS, (B, n) for walks (the
    logit of label 1). ``batch`` is a dict of padded tensors with a ``mask`` (B, n), True on
    real tokens: ``words``/``affixes``/``shapes`` (POS) or ``x`` (walks). ``forward(batch,
    start)`` hands ``start`` to the recurrent layer: the INN's warm start (the trainer's
    :class:`inn.experiment.train.loop.WarmStarts`), ignored by the explicit baselines.
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.config = cfg
        self.encoder = FeatureEncoder(cfg) if cfg.task == "pos" else WalkEncoder(cfg)
        self.rnn = recurrent_layer(cfg, self.encoder.output_size)
        self.dropout = nn.Dropout(cfg.dropout)
        outputs = cfg.num_classes if cfg.task == "pos" else 1
        self.output = nn.Linear(self.rnn.output_size, outputs)

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
        return logits if self.config.task == "pos" else logits.squeeze(-1)

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
        raise InnError(f"model {cfg.kind} with hidden_size {cfg.hidden_size}: its weights alone take "
                       f"{need / 2**30:,.1f} GiB, more than the {available / 2**30:,.1f} GiB of memory available; "
                       "choose a smaller hidden_size")
    try:
        return SequenceLabeler(cfg)
    except (MemoryError, RuntimeError) as exc:
        if isinstance(exc, RuntimeError) and "alloc" not in str(exc):
            raise
        raise InnError(f"model {cfg.kind} with hidden_size {cfg.hidden_size}: its weights do not fit in memory "
                       f"({_short(exc)}); choose a smaller hidden_size") from None


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
def predict(model: SequenceLabeler, examples: list[dict[str, Tensor]], batch_size: int = 20,
            device: str | torch.device = "cpu", progress: bool = False
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
        if model.config.task == "pos":
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
