"""The epoch-5 fixture's forward solves over the b = 0.5 training walks, in file order, in
batches of 20 (no gradients): every sequence a solve leaves above tol, with its result code, and
how many the float64 retry and the homotopy took.

    [FIXTURE=tests/fixtures/<fixture>.pt] python forward_sweep.py WALKS_B0.5_FOLDER FIRST_BATCH BATCHES OPTIONS_JSON

The walks folder is the workflow's ``results/data/walks/b0.5`` of ``config/paper_walks.yaml``;
OPTIONS_JSON are layer options on top of the fixture's, e.g. ``'{"fallback": null}'`` for the
float32 solve alone. ``tests/fixtures/walks_b05_forward_stall.pt`` is the first sequence this
found (batch 799, sequence 4, walk 15,984).
"""

import json
import logging
import os
import sys
import time

import torch

from inn.batches import collate
from inn.checkpoints import load_checkpoint
from inn.data.walk import load_walks
from inn.solvers import ResultCode

logging.basicConfig(level=logging.INFO, format="%(message)s")
torch.set_num_threads(1)
folder, first, count, options = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])
model, _ = load_checkpoint(os.environ.get("FIXTURE", "tests/fixtures/walks_b05_inn_epoch5.pt"))
model.eval()
model.rnn.options = {**model.rnn.options, **options}
walks = load_walks(f"{folder}/train.pt")
start, failed, retried, homotopy = time.process_time(), 0, 0, 0
for i in range(first, first + count):
    rows = range(20 * i, 20 * i + 20)
    batch = collate([{"x": walks["x"][j, :walks["lengths"][j]], "y": walks["y"][j, :walks["lengths"][j]]} for j in rows])
    with torch.no_grad():
        model.rnn(batch["x"], batch["mask"])
    stats = model.rnn.last_stats
    retried += stats.extra.get("fallback", 0)
    homotopy += stats.extra.get("homotopy", 0)
    for j in (~stats.converged).nonzero().flatten().tolist():
        failed += 1
        logging.info("batch %d sequence %d (walk %d, n = %d): %s after %d iterations, residual %.2e", i, j, rows[j],
                     int(walks["lengths"][rows[j]]), ResultCode(int(stats.code[j])).name,
                     int(stats.newton_iterations[j]), float(stats.residual[j]))
logging.info("%d batches, %d sequences above tol, %d solved again in float64, %d by the homotopy, %.0f CPU s", count,
             failed, retried, homotopy, time.process_time() - start)
