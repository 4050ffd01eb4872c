"""The b = 0.5 walks INN's epoch-5 resume state trained on for two epochs (6 and 7) of the first
2,000 training walks (dev: the first 500), without and with the adjoint's float64 fallback:
the solves at their limit, the iterations and the dev error, from the run's own history.

    git show 87fb7a7:docs/benchmark/paper_walks_6ebf96e/unfinished/walks/b0.5/inn/seed1/last.pt > epoch5.pt
    python fallback_training.py none|float64|direct WALKS_B0.5_FOLDER OUT_FOLDER

The walks folder is the workflow's ``results/data/walks/b0.5`` of ``config/paper_walks.yaml``
(fingerprint 14a89a4e4e15692f, the state's). The state's settings are edited to the slice and
the fallback before it resumes: a measurement, not a continuation of the run.
"""

import logging
import sys
from pathlib import Path

import torch

from inn.experiment.train import TrainConfig, train

logging.basicConfig(level=logging.INFO)
fallback, data, out = sys.argv[1], sys.argv[2], Path(sys.argv[3]) / sys.argv[1]
state = torch.load("epoch5.pt", weights_only=True)
state["settings"]["training"].update(max_train=2000, max_dev=500)
options = dict(state["settings"]["model"]["solver_options"])
if fallback != "none":
    options["backward_fallback"] = fallback
state["settings"]["model"]["solver_options"] = options
out.mkdir(parents=True, exist_ok=True)
torch.save(state, out / "last.pt")
torch.set_num_threads(1)
training = {k: v for k, v in state["settings"]["training"].items() if k != "seed"}
model = state["settings"]["model"]
history = train("walks", data, "inn", out, TrainConfig(**training, seed=1),
                {"hidden_size": model["hidden_size"], "solver": model["solver"], "solver_options": options,
                 "trainable_boundary": model["trainable_boundary"]}, device="cpu", stop_after=2)
shown = ["epoch", "dev_error", "seconds", "newton_iters", "backward_iters", "nonconverged", "backward_nonconverged",
         "newton_limit", "backward_limit", "newton_hist", "backward_hist"]
logging.info("\n%s", history[[c for c in shown if c in history]].to_string())
