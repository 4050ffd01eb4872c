"""The check an implicit layer runs on its cell when it is built: one forward on a tiny probe.

A cell of one's own that returns the wrong shape, dtype or device, or NaN from finite input,
would otherwise fail deep inside the first solve of training (a long torch traceback naming
neither the cell nor what was expected), or pass as a non-finite loss. The probe costs one
forward on 2 sequences of 3 positions, with inputs from a generator of its own (the global
random state, hence the seeded initialisation of a run, is untouched) and no autograd graph.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from inn.errors import CellError

#: the probe's batch: B sequences of n positions
PROBE_BATCH, PROBE_LENGTH = 2, 3


def _describe(value: object) -> str:
    if isinstance(value, Tensor):
        return f"a {str(value.dtype).removeprefix('torch.')} tensor of shape {tuple(value.shape)} on {value.device}"
    return f"a {type(value).__name__}"


def check_cell(cell: nn.Module, state_size: int, input_size: int) -> None:
    """Run ``cell`` once on finite probe inputs and check what it returns.

    x (B, n, input_size), h_prev and h_next (B, n, state_size), in the dtype and on the device
    of the cell's first parameter (float32 on the CPU without one), must give h (B, n,
    state_size) of that dtype on that device, every entry finite.

    Raises:
        CellError: one line naming the cell's class, what it returned and what was expected
            (or the error its forward raised).
    """
    first = next(iter(cell.parameters()), None)
    dtype = first.dtype if first is not None and first.is_floating_point() else torch.float32
    device = first.device if first is not None else torch.device("cpu")
    generator = torch.Generator().manual_seed(0)
    B, n = PROBE_BATCH, PROBE_LENGTH
    x, h_prev, h_next = (
        0.5 * torch.randn(B, n, size, generator=generator, dtype=dtype).to(device)
        for size in (input_size, state_size, state_size)
    )
    name = type(cell).__name__
    shown = f"x {(B, n, input_size)}, h_prev and h_next {(B, n, state_size)}"
    with torch.no_grad():
        try:
            h = cell(x, h_prev, h_next)
        except Exception as exc:  # noqa: BLE001 - the user's code: its error, one line naming it
            first_line = (str(exc).strip().splitlines() or [""])[0]
            raise CellError(
                f"cell {name} failed on a probe ({shown}, {str(dtype).removeprefix('torch.')} on "
                f"{device}): {type(exc).__name__}: {first_line}"
            ) from None
    expected = f"a {str(dtype).removeprefix('torch.')} tensor of shape {(B, n, state_size)} on {device}"
    if not (isinstance(h, Tensor) and tuple(h.shape) == (B, n, state_size) and h.dtype == dtype and h.device == device):
        raise CellError(
            f"cell {name} returned {_describe(h)} for a probe ({shown}); expected {expected}: "
            "forward(x, h_prev, h_next) gives the new state of every position"
        )
    if not torch.isfinite(h).all():
        bad = int((~torch.isfinite(h)).sum())
        raise CellError(
            f"cell {name} returned {bad} non-finite value(s) of {h.numel()} for a finite probe ({shown}) "
            "at its initial weights; expected finite states: look for a division, log or sqrt "
            "that needs guarding"
        )
