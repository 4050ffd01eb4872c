"""Default CPU threads: a job not told how many takes the cores free of other work, so that jobs
beside each other do not oversubscribe the machine (torch's own default takes every core)."""

from __future__ import annotations

import os

import pytest
import torch

from inn import device


@pytest.fixture
def machine(monkeypatch):
    """A machine of ``cores`` cores (this process's affinity) at one-minute load ``load``."""

    def make(cores: int, load: float) -> None:
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))
        monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))

    return make


@pytest.mark.parametrize(
    "cores, load, threads",
    [
        (2, 0.1, 2),  # a quiet two-core machine: both cores
        (2, 1.2, 1),  # one single-thread training beside: the other core
        (2, 13.0, 1),  # busy beyond its cores: one thread, never none
        (64, 0.0, device.MAX_DEFAULT_THREADS),  # a big quiet machine: capped
        (8, 2.6, 4),  # eight cores, three busy: the cap of four
    ],
)
def test_default_threads_take_the_free_cores_at_most_the_cap(machine, cores, load, threads):
    machine(cores, load)
    assert device.default_threads() == threads


def test_set_threads_honours_a_request_then_omp_num_threads_then_the_default(machine, monkeypatch):
    before = torch.get_num_threads()
    try:
        machine(2, 1.2)
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        assert device.set_threads(2) == 2
        assert device.set_threads(None) == 1  # the default on a two-core machine with one core busy
        torch.set_num_threads(3)
        monkeypatch.setenv("OMP_NUM_THREADS", "3")
        assert device.set_threads(None) == 3  # the user's OMP_NUM_THREADS stands
    finally:
        torch.set_num_threads(before)
