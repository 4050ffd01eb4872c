"""The experiments' registries: the tasks (:data:`TASKS`), the recurrent cells (:data:`CELLS`),
the models (:data:`MODELS`) and the parts models play in the paper's claims (:data:`ROLES`).

Each is a table of records looked up by name, and what differs between two entries is a field
of their records: no code elsewhere compares a task's or a model's name. :mod:`inn.models`
builds the models these records describe (and re-exports the registries' names).

A task is what a model learns: ``pos`` (a tag per word of text, scored by accuracy, paper 3.2)
or ``walks`` (a 0/1 label per step of a random walk, scored by error, paper 3.1).
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from torch import nn

from inn.errors import InnError

if TYPE_CHECKING:
    import pandas as pd

# --------------------------------------------------------------------------- tasks


@dataclass(frozen=True)
class TaskSpec:
    """One task of the experiments: how its data is stored, what its models output, how its
    runs are scored and which of them is best.

    ``tags`` marks labels from a tag set read from text (a softmax over ``num_classes`` tags,
    prediction by argmax, cross-entropy; the data holds feature vocabularies and a tag column,
    and a trained model can be a tagger file); otherwise a label is 0/1 from one logistic unit
    per position (sigmoid, binary cross-entropy). ``metric`` is the score evaluation reports
    (``accuracy`` in percent, ``error`` as a fraction; :meth:`score`), better when higher if
    ``higher_is_better``. ``gold`` is the batch key of the gold labels, ``encoder`` the name of
    the input encoder in :data:`inn.models.ENCODERS`. A split is the file ``<split><suffix>``
    of the prepared folder, beside the files ``extras``. ``feature_size`` gives the width of
    the encoded input from the model's fields (the data's, or the config's ``features``): what
    :data:`FEATURES` stands for in a hidden-size rule; None where it stands for nothing (walks:
    a hidden size is always configured). ``paper_table`` is the paper's table of its results,
    ``noun`` the word the report's tables use for it.
    """

    name: str
    metric: str
    higher_is_better: bool
    gold: str
    tags: bool
    encoder: str
    suffix: str
    paper_table: int
    noun: str
    extras: tuple[str, ...] = ()
    feature_size: Callable[[Mapping[str, Any]], int] | None = None

    @property
    def dev_column(self) -> str:
        """The history's column of the dev score (``dev_accuracy``, ``dev_error``)."""
        return f"dev_{self.metric}"

    def score(self, correct_share: float) -> float:
        """The metric from the share of positions labelled right: accuracy in percent, or error."""
        return 100.0 * correct_share if self.higher_is_better else 1.0 - correct_share

    def better(self, value: float, best: float | None) -> bool:
        """Is ``value`` of the metric better than ``best`` (None: nothing yet)?"""
        if best is None:
            return True
        return value > best if self.higher_is_better else value < best

    def best(self, values: pd.Series) -> float:
        """The best of a column of the metric (a run's dev scores over its epochs)."""
        return float(values.max() if self.higher_is_better else values.min())

    def output_width(self, num_classes: int) -> int:
        """The output layer's width: a logit per tag, or the one logistic unit's."""
        return num_classes if self.tags else 1

    def data_files(self, folder: str, splits: Sequence[str]) -> list[str]:
        """The prepared files of ``splits`` in ``folder`` and the files they need beside them."""
        return [f"{folder}/{split}{self.suffix}" for split in splits] + [f"{folder}/{name}" for name in self.extras]


def _tag_feature_size(fields: Mapping[str, Any]) -> int:
    from inn.data.features import feature_size

    return feature_size(fields["word_dim"], fields["affix_dim"])


#: every task, by the name the config, the result paths and the checkpoints use
TASKS: dict[str, TaskSpec] = {
    spec.name: spec
    for spec in (
        TaskSpec(
            "pos",
            metric="accuracy",
            higher_is_better=True,
            gold="tags",
            tags=True,
            encoder="features",
            suffix=".tsv",
            extras=("features.json",),
            feature_size=_tag_feature_size,
            paper_table=2,
            noun="tagging",
        ),
        TaskSpec(
            "walks",
            metric="error",
            higher_is_better=False,
            gold="y",
            tags=False,
            encoder="steps",
            suffix=".pt",
            paper_table=1,
            noun="walk",
        ),
    )
}


def task_spec(name: str) -> TaskSpec:
    """The record of the task ``name``.

    Raises:
        InnError: no such task.
    """
    spec = TASKS.get(name)
    if spec is None:
        raise InnError(f"unknown task {name!r}; use one of {', '.join(TASKS)}")
    return spec


def paper_task(table: int) -> str:
    """The task whose results the paper's Table ``table`` reports (1: walks, 2: pos)."""
    return next(name for name, spec in TASKS.items() if spec.paper_table == table)


def tagging_task() -> str:
    """The task whose models tag text (:attr:`TaskSpec.tags`): what a checkpoint that names no
    task was trained on (the first tagger files)."""
    return next(name for name, spec in TASKS.items() if spec.tags)


# --------------------------------------------------------------------------- cells and models

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
        raise InnError(
            f"{kind} {name} is the package's own and cannot be replaced: register yours under another "
            f"name (e.g. my_{name})"
        )


def register_cell(name: str, factory: Callable[..., nn.Module], implicit: bool = True, layer: bool = False) -> CellSpec:
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
        raise InnError(
            f"cell {name}: the factory must be callable (input_size, hidden_size) -> module, "
            f"got {type(factory).__name__}"
        )
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
            raise InnError(
                f"model {spec.name}: unknown cell {spec.cell!r}; register it first with "
                f"inn.models.register_cell, or use one of {', '.join(CELLS)}"
            )
        if cell.implicit != spec.implicit:
            raise InnError(
                f"model {spec.name}: cell {spec.cell} is {'implicit' if cell.implicit else 'explicit'}; "
                f"set implicit={cell.implicit} in its ModelSpec"
            )
    if spec.role is not None:
        if spec.role not in ROLES:
            raise InnError(f"model {spec.name}: unknown role {spec.role!r}; use one of {', '.join(ROLES)}, or None")
        holder = next((name for name, other in MODELS.items() if other.role == spec.role), spec.name)
        if holder != spec.name:
            raise InnError(
                f"model {spec.name}: the role {spec.role} is {holder}'s ({ROLES[spec.role]}); a role "
                "is one model's, and a model of one's own needs none to appear in the tables"
            )
    if spec.module is None:
        caller = sys._getframe(1).f_globals
        spec = dataclasses.replace(
            spec, module=caller.get("__file__") if caller.get("__name__") == "__main__" else caller.get("__name__")
        )
    MODELS[spec.name] = spec
    return spec


_BASELINE = {"pos": ("baseline_hidden_size",)}
for _spec in (
    ModelSpec("gru", "GRU", "gru", sizes=_BASELINE),
    ModelSpec("lstm", "LSTM", "lstm", sizes=_BASELINE),
    ModelSpec(
        "bigru", "Bidirectional GRU", "gru", bidirectional=True, sizes=_BASELINE, role="timing_reference", short="BiGRU"
    ),
    ModelSpec(
        "bilstm",
        "b-LSTM",
        "lstm",
        bidirectional=True,
        sizes={"pos": ("baseline_hidden_size",), "walks": ("bilstm_hidden_sizes",)},
        role="swept",
        colour="C1",
    ),
    ModelSpec(
        "inn",
        "INN",
        "implicit_gru",
        bidirectional=True,
        implicit=True,
        sizes={"pos": ("inn_hidden_size", FEATURES), "walks": ("inn_hidden_size",)},
        role="claimed",
        colour="C0",
    ),
    ModelSpec(
        "inn_lstm",
        "Implicit LSTM (ours, not in the paper)",
        "implicit_lstm",
        bidirectional=True,
        implicit=True,
        in_paper=False,
        sizes={task: ("inn_lstm_hidden_size", "inn_hidden_size", FEATURES) for task in TASKS},
        short="implicit LSTM",
        colour="C2",
    ),
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
    raise InnError(
        f"no model of the registry plays the role {role} ({ROLES[role]}): inn.models.MODELS was "
        "changed by hand; add models with inn.models.register"
    )


def paper_baselines() -> list[str]:
    """The baselines of the paper's Table 2 claim, the INN's accuracy above theirs: its
    bidirectional explicit models (``bigru``, ``bilstm``)."""
    return [
        name
        for name, spec in MODELS.items()
        if spec.in_paper and spec.bidirectional and not spec.implicit and spec.cell is not None
    ]


def bidirectional_baselines() -> dict[str, str]:
    """Each cell's bidirectional explicit model (``{"gru": "bigru", "lstm": "bilstm"}``): what
    an implicit layer of that cell is timed and compared against."""
    return {
        spec.cell: name
        for name, spec in MODELS.items()
        if spec.cell is not None and spec.bidirectional and not spec.implicit
    }


_NAME = re.compile(r"^(?P<kind>[a-z][a-z0-9_]*)(?:-h(?P<hidden>\d+))?$")


def base_name(name: str) -> str:
    """The registry's name of a run's model: ``"bilstm-h300"`` -> ``"bilstm"``, ``"perceptron"`` as is."""
    return re.sub(r"-h\d+$", "", name)


def parse_model_name(name: str) -> tuple[str, int | None]:
    """``"bilstm-h300"`` -> ``("bilstm", 300)``; ``"inn"`` -> ``("inn", None)``."""
    match = _NAME.match(name)
    if not match or match["kind"] not in neural_models():
        raise InnError(
            f"unknown model {name!r}: use one of {', '.join(neural_models())}, optionally with a size (bilstm-h300)"
        )
    hidden = match["hidden"]
    return match["kind"], (int(hidden) if hidden else None)
