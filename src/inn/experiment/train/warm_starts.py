"""The INN's warm starts: every training sequence's last solution (or adjoint), kept between epochs
to start its next solve from (:class:`WarmStarts`)."""

from __future__ import annotations

import itertools

import torch

from inn.errors import InnError


class WarmStarts:
    """Every training sequence's last solution of the implicit layer, to start its next solve from.

    Between two epochs the weights move little, so a sentence's states under the new weights
    lie close to those under the old ones: on the paper-scale INN (k = 448, real sentences of
    40 tokens) the forward solve from the previous epoch's states took 6.0 iterations against
    10.0 from zero. The states are kept flat, one row per training token, in float16 (every
    |h| < 1, and the solve refines them to its tolerance anyway): 183 MB at the paper's size on
    EWT, about 410 MB for the paper's 50,000 training walks (k = 200). They are saved in
    ``last.pt``, so a resumed run starts its solves from the same points as an uninterrupted
    one. A batch none of whose sequences has been solved yet gets no start
    (the solver's own candidates, as without warm starts); in a mixed batch the unsolved ones
    start from zero. The adjoints of the backward pass are kept the same way
    (``warm_start_adjoint``), in bfloat16: gradients have no bound, and a starting point
    needs their range more than their digits.
    """

    def __init__(
        self, lengths: list[int], width: int, device: torch.device, dtype: torch.dtype = torch.float16
    ) -> None:
        """``width``: the layer's state width (``state_size``: k for the implicit GRU, 2k for
        the implicit LSTM's [h; c], whose |c| may exceed 1 but stays far inside float16)."""
        self.offsets = torch.tensor([0, *itertools.accumulate(lengths)], device=device)
        self.states = torch.zeros(int(self.offsets[-1]), width, dtype=dtype, device=device)
        self.solved = torch.zeros(len(lengths), dtype=torch.bool, device=device)

    def _rows(self, index: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The flat row of each position of the sequences ``index`` padded to n, and which are real."""
        first = self.offsets[index]
        t = torch.arange(n, device=first.device)
        real = t < (self.offsets[index + 1] - first).unsqueeze(1)
        return (first.unsqueeze(1) + t).masked_fill(~real, 0), real

    def gather(self, index: torch.Tensor, n: int) -> torch.Tensor | None:
        """Starting states (len(index), n, width) for a batch padded to n, zero at padding."""
        if not bool(self.solved[index].any()):
            return None
        rows, real = self._rows(index, n)
        return self.states[rows] * real.unsqueeze(-1)

    def update(self, index: torch.Tensor, H: torch.Tensor) -> None:
        """Keep the batch's solution H (len(index), n, width) for the next epoch."""
        rows, real = self._rows(index, H.shape[1])
        self.states[rows[real]] = H[real].to(self.states.dtype)
        self.solved[index] = True

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"offsets": self.offsets.cpu(), "states": self.states.cpu(), "solved": self.solved.cpu()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        if not torch.equal(state["offsets"], self.offsets.cpu()) or state["states"].shape != self.states.shape:
            raise InnError("the warm starts in last.pt belong to other training data; delete it to start afresh")
        self.states.copy_(state["states"])
        self.solved.copy_(state["solved"])
