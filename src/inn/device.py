"""Which device a job runs on (``auto`` means CUDA when torch sees a GPU, else the CPU), and
how many CPU threads it takes when not told."""

from __future__ import annotations

import argparse
import os

import torch

from inn.errors import InnError, positive_int


def resolve_device(device: str) -> torch.device:
    """``auto`` -> CUDA when present, else CPU; ``cuda`` without a GPU is an error."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise InnError("device: cuda was asked for, but torch sees no CUDA device (use auto or cpu)")
    if device not in ("cpu",) and not device.startswith("cuda"):
        raise InnError(f"device must be auto, cpu or cuda, not {device!r}")
    return torch.device(device)


def add_device_argument(parser: argparse.ArgumentParser) -> None:
    """A command's ``--device`` option, as :func:`resolve_device` reads it."""
    parser.add_argument("--device", default="auto", help="auto (CUDA when present), cpu or cuda")


def add_threads_argument(parser: argparse.ArgumentParser) -> None:
    """A command's ``--threads`` option, as :func:`set_threads` reads it."""
    parser.add_argument(
        "--threads",
        type=positive_int,
        help="torch CPU threads (default: the cores free of other work, at most 4; OMP_NUM_THREADS where set)",
    )


#: the most CPU threads a job takes when not told: the models' matrices (k of a few hundred,
#: batches of 20) gain little from more, and each thread more is a core taken from other jobs
MAX_DEFAULT_THREADS = 4


def available_cores() -> int:
    """The CPU cores this process may run on: its affinity mask where the system has one (a
    scheduler's or ``taskset``'s share), else every core."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def machine_load() -> float:
    """The one-minute load average (runnable processes of every user), NaN where the system
    has none."""
    try:
        return float(os.getloadavg()[0])
    except (AttributeError, OSError):
        return float("nan")


def default_threads(follow_load: bool = True) -> int:
    """CPU threads for a job not told how many: the cores it may run on less those other
    processes keep busy (the load average, rounded), at least 1, at most
    :data:`MAX_DEFAULT_THREADS`. torch's own default, every core of the machine, oversubscribes a
    shared one: its threads wait on each other while another process holds a core, and a job
    runs several times slower than on one thread. ``follow_load=False``: the cores alone (at
    most :data:`MAX_DEFAULT_THREADS`), the same on every start, for training, whose numbers
    depend on the thread count (a sum's order), so that a rerun gives the same numbers."""
    cores = available_cores()
    load = machine_load() if follow_load else float("nan")
    free = cores if load != load else cores - int(load + 0.5)  # NaN: no load average known
    return max(1, min(MAX_DEFAULT_THREADS, free))


def set_threads(requested: int | None, follow_load: bool = True) -> int:
    """Set torch's CPU threads: ``requested`` where given, else OMP_NUM_THREADS where set (torch
    read it), else :func:`default_threads`; returns the number set."""
    if requested:
        torch.set_num_threads(requested)
    elif not os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(default_threads(follow_load))
    return torch.get_num_threads()
