"""Biased random walks (paper 3.1): find where a random walk stops being unbiased.

Per sequence: a length N uniform on 1..max_len, a change time t' uniform on [0, N), and a
direction v in R^d, drawn either uniform on the unit sphere (``unit``) or as v ~ N(0, I_d)
(``gaussian``, the default: the paper leaves this open, and only with it can the paper's errors
be reached; ``inn.experiment.data.walk_floor``). The walk starts at x_0 = 0 and takes standard
normal steps, x_t = x_{t-1} + N(0, I_d); each step that lands at a time t > t' also moves by
b * v, the first such step only by the fraction (t - t') of it. The model sees x_1..x_N and
must label each step y_t = 0 if t <= t' and 1 if t > t' (so the last label is always 1).
"""

from __future__ import annotations

import os

import torch

from inn.errors import InnError
from inn.io import torch_load_data, torch_load_problem, torch_save

#: How the bias direction v is drawn.
DIRECTIONS = ("unit", "gaussian")


def generate_walks(
    n: int, b: float, dim: int, seed: int, max_len: int = 40, min_len: int = 1, direction: str = "gaussian"
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Generate ``n`` biased random walks of dimension ``dim`` with bias ``b``.

    Lengths are uniform on ``min_len..max_len`` (the paper: 1..40; the timing stage sets both
    to one n to get walks of exactly that length). ``direction`` says how v is drawn
    (:data:`DIRECTIONS`).

    Generation is vectorised over all sequences and reproducible: the same arguments give the
    same walks on every machine (a CPU ``torch.Generator`` seeded with ``seed``).

    Returns:
        ``n`` pairs ``(x, y)``: ``x`` float32 of shape ``(N, dim)``, ``y`` long of shape
        ``(N,)`` with labels ``0...0 1...1``.
    """
    if n < 1 or dim < 1 or not 1 <= min_len <= max_len:
        raise InnError(
            f"generate_walks: need n, dim >= 1 and 1 <= min_len <= max_len "
            f"(got n={n}, dim={dim}, min_len={min_len}, max_len={max_len})"
        )
    if direction not in DIRECTIONS:
        raise InnError(f"generate_walks: unknown direction {direction!r} (expected one of {', '.join(DIRECTIONS)})")
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(min_len, max_len + 1, (n,), generator=gen)  # N
    change = torch.rand(n, generator=gen, dtype=torch.float64) * lengths  # t' in [0, N)
    v = torch.randn(n, dim, generator=gen, dtype=torch.float64)
    if direction == "unit":
        v = v / v.norm(dim=1, keepdim=True)
    steps = torch.randn(n, max_len, dim, generator=gen, dtype=torch.float64)
    times = torch.arange(1, max_len + 1, dtype=torch.float64)  # t = 1..max_len
    # Share of the bias each step gets: 0 up to t', the fraction t - t' on the first step past
    # it, 1 after that.
    share = (times - change[:, None]).clamp(0.0, 1.0)  # (n, max_len)
    x = torch.cumsum(steps + b * share[..., None] * v[:, None, :], dim=1).float()
    y = (times > change[:, None]).long()
    return [(x[i, :length], y[i, :length]) for i, length in enumerate(lengths.tolist())]


def pad_walks(walks: list[tuple[torch.Tensor, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Walks padded with zeros into one tensor each: ``x`` (S, L, d), ``y`` (S, L), ``lengths`` (S,)."""
    lengths = torch.tensor([len(y) for _, y in walks])
    width, dim = int(lengths.max()), walks[0][0].shape[1]
    x = torch.zeros(len(walks), width, dim)
    y = torch.zeros(len(walks), width, dtype=torch.long)
    for i, (xi, yi) in enumerate(walks):
        x[i, : len(yi)], y[i, : len(yi)] = xi, yi
    return {"x": x, "y": y, "lengths": lengths}


def save_walks(path: str | os.PathLike, walks: list[tuple[torch.Tensor, torch.Tensor]], **meta) -> None:
    """Store walks padded (:func:`pad_walks`) with their generator's settings ``meta``, atomically."""
    torch_save({**pad_walks(walks), **meta}, path)


def load_walks(path: str | os.PathLike) -> dict:
    """Read a file written by :func:`save_walks`."""
    if os.path.isdir(path):
        raise InnError(f"{path} is a folder, not a walk file: give one of its files (train.pt, dev.pt or test.pt)")
    if not os.path.isfile(path):
        raise InnError(f"walk file not found: {path} (run the data stage first)")
    try:
        data = torch_load_data(path, "give a file written by `inn generate-walks` (train.pt, dev.pt or test.pt)")
    except InnError:
        raise
    except Exception as exc:  # a text file, an empty or truncated file
        raise InnError(
            f"cannot read walk file {path} ({torch_load_problem(path, exc)}): give a file written by "
            "`inn generate-walks` (train.pt, dev.pt or test.pt)"
        ) from None
    if not isinstance(data, dict) or not {"x", "y", "lengths"} <= set(data):
        raise InnError(
            f"{path} is not a walk file (no x, y and lengths; a model checkpoint?): give a file written "
            "by `inn generate-walks` (train.pt, dev.pt or test.pt)"
        )
    return data
