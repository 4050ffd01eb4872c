"""The save-within-epoch patch on the pinned 231d5d2: a 2-epoch INN on 60 walks, stopped inside
epoch 2, goes on after its last saved batch and ends with the uninterrupted run's history and
weights, to the bit. From the patched checkout, with its environment:

    cd out/pinned/231d5d2 && OMP_NUM_THREADS=1 PYTHONPATH=src .venv/bin/python \
        ../../../archive/paper_walks/patches/check_save_within.py
"""

import tempfile
from pathlib import Path

import pandas as pd
import torch

from inn.data.walk import generate_walks, save_walks


def tiny_walks(out):
    for split, n, seed in zip(("train", "dev", "test"), (60, 20, 20), (1, 2, 3)):
        save_walks(out / f"{split}.pt", generate_walks(n, b=1.0, dim=3, seed=seed, max_len=12))
    return out


import inn.experiment.train as T

root = Path(tempfile.mkdtemp())
data = tiny_walks(root / "walks")
cfg = T.TrainConfig(max_epochs=2, patience=5, lr=0.5, batch_size=5, dropout=0.2)
opts = {
    "hidden_size": 6,
    "solver": "newton_krylov",
    "solver_options": {"tol": 1e-4, "max_iter": 20, "krylov_max_iter": 20},
}
straight = T.train("walks", data, "inn", root / "a", cfg, opts, device="cpu")
T.SAVE_EVERY = 0.0
real, calls = T.token_losses, []


def stopping(*a, **k):
    calls.append(1)
    if len(calls) == 12 + 5 + 2:  # epoch 1's 12 batches and 5 dev batches, then epoch 2's second
        raise KeyboardInterrupt
    return real(*a, **k)


T.token_losses = stopping
try:
    T.train("walks", data, "inn", root / "b", cfg, opts, device="cpu")
except KeyboardInterrupt:
    pass
T.token_losses = real
st = torch.load(root / "b" / "last.pt", weights_only=True)["train_state"]
assert st["epoch"] == 1 and st["within"]["epoch"] == 2 and st["within"]["batches"] == 2, st.get("within")
resumed = T.train("walks", data, "inn", root / "b", cfg, opts, device="cpu")
drop = ["seconds", "cpu_seconds"]
pd.testing.assert_frame_equal(straight.drop(columns=drop), resumed.drop(columns=drop))
a = torch.load(root / "a" / "checkpoint.pt", weights_only=True)["state_dict"]
b = torch.load(root / "b" / "checkpoint.pt", weights_only=True)["state_dict"]
assert all(torch.equal(a[k], b[k]) for k in a)
print("resumed after batch 2 of epoch 2: the same history and weights")  # noqa: T201
