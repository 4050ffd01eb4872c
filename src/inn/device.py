"""Which device a job runs on: ``auto`` means CUDA when torch sees a GPU, else the CPU."""

from __future__ import annotations

import torch

from inn.errors import InnError


def resolve_device(device: str) -> torch.device:
    """``auto`` -> CUDA when present, else CPU; ``cuda`` without a GPU is an error."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise InnError("device: cuda was asked for, but torch sees no CUDA device (use auto or cpu)")
    if device not in ("cpu",) and not device.startswith("cuda"):
        raise InnError(f"device must be auto, cpu or cuda, not {device!r}")
    return torch.device(device)
