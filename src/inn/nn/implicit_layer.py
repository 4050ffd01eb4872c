"""The implicit layer's former module, kept for one release: its names now live in
:mod:`inn.nn.system` (the batch's equations and their linearisations) and
:mod:`inn.nn.sequence` (the cell protocol and :class:`ImplicitSequence`). Import from those;
this module re-exports them so that code and pickles that name ``inn.nn.implicit_layer``
keep working until then.
"""

from inn.nn.sequence import Cell, HeldCell, ImplicitSequence
from inn.nn.system import (
    AutogradLinearization,
    BatchTensors,
    CellLinearization,
    ImplicitSystem,
    affine,
    evaluate_cell,
    neighbours,
    next_real_mask,
    product,
    switch,
)

__all__ = [
    "AutogradLinearization",
    "BatchTensors",
    "Cell",
    "CellLinearization",
    "HeldCell",
    "ImplicitSequence",
    "ImplicitSystem",
    "affine",
    "evaluate_cell",
    "neighbours",
    "next_real_mask",
    "product",
    "switch",
]
