"""The b = 0.5 walks INN's epoch-5 resume state trained on for two epochs (6 and 7) under the
solver settings of a MODE: the solves at their limit, the iterations, the wall and CPU seconds
and the dev error, from the run's own history.

    git show 87fb7a7:archive/paper_walks_6ebf96e/unfinished/walks/b0.5/inn/seed1/last.pt > epoch5.pt
    python fallback_training.py MODE WALKS_B0.5_FOLDER OUT_FOLDER [MAX_TRAIN MAX_DEV]

``STATE=<last.pt>`` trains another resume state of the same data for its next two epochs (e.g.
seed 3's after epoch 12, ``archive/paper_walks/unfinished/train/walks/b0.5/inn/seed3/last.pt``
as committed in dd2d4d9).

MODE: ``none`` (no fallback, forward or adjoint, no compaction: the solver as the run had it),
``float64`` or ``direct`` (that adjoint fallback, no compaction, no forward fallback),
``default`` (the layer's defaults today: both float64 fallbacks and compaction), ``jacobianW``
(the defaults, and Jacobian regularisation of weight W from epoch 6 on: it changes the model),
``warmadjoint`` (the defaults, and each adjoint started from the same walks' adjoint of the
epoch before where that start is the closer one, ``warm_start_adjoint``), ``memoryM`` (the
defaults with the forward Anderson's memory M), ``gmres`` / ``anderson`` (the defaults with
that adjoint throughout; the default, ``auto``, turns from Anderson to GMRES once a layer's
adjoints average over 30 iterations), ``afterN`` (the defaults with ``fallback_after`` N: float32
iterations per forward candidate before the float64 retry).

The walks folder is the workflow's ``results/data/walks/b0.5`` of ``config/paper_walks.yaml``
(fingerprint 14a89a4e4e15692f, the state's). MAX_TRAIN / MAX_DEV: the first walks of each
(2,000 / 500 in the first measurement; omitted: the whole 50,000 / 2,500, the paper's epoch).
The state's settings are edited to the slice and the fallback before it resumes: a
measurement, not a continuation of the run. The state holds no warm starts, so epoch 6 starts
cold and epoch 7 is the one that shows what training meets.
"""

import logging
import os
import sys
from pathlib import Path

import torch

from inn.experiment.train import TrainConfig, train

logging.basicConfig(level=logging.INFO)
fallback, data, out = sys.argv[1], sys.argv[2], Path(sys.argv[3]) / sys.argv[1]
limits = [int(x) for x in sys.argv[4:6]] or [None, None]
state = torch.load(os.environ.get("STATE", "epoch5.pt"), weights_only=True)
last_epoch = state["train_state"]["epoch"] + 2
state["settings"]["training"].update(max_train=limits[0], max_dev=limits[1])
options = dict(state["settings"]["model"]["solver_options"])
if fallback == "warmadjoint":
    state["settings"]["training"].update(warm_start_adjoint=True)
elif fallback.startswith("memory"):
    options.update(memory=int(fallback.removeprefix("memory")))
elif fallback in ("gmres", "anderson"):
    options.update(backward_solver=fallback)
elif fallback.startswith("after"):
    options.update(fallback_after=int(fallback.removeprefix("after")))
elif fallback.startswith("jacobian"):
    state["settings"]["training"].update(jacobian_weight=float(fallback.removeprefix("jacobian")))
elif fallback != "default":
    options.update(backward_fallback=None if fallback == "none" else fallback, compact=False, fallback=None)
state["settings"]["model"]["solver_options"] = options
out.mkdir(parents=True, exist_ok=True)
if (out / "last.pt").exists():  # a measurement cut short goes on from its last epoch
    state = torch.load(out / "last.pt", weights_only=True)
else:
    torch.save(state, out / "last.pt")
torch.set_num_threads(1)
training = {k: v for k, v in state["settings"]["training"].items() if k != "seed"}
model = state["settings"]["model"]
history = train("walks", data, "inn", out, TrainConfig(**training, seed=state["settings"]["training"].get("seed", 1)),
                {"hidden_size": model["hidden_size"], "solver": model["solver"], "solver_options": options,
                 "trainable_boundary": model["trainable_boundary"]}, device="cpu",
                stop_after=last_epoch - state["train_state"]["epoch"])
shown = ["epoch", "dev_error", "seconds", "cpu_seconds", "newton_iters", "backward_iters", "nonconverged",
         "backward_nonconverged", "newton_limit", "backward_limit", "newton_hist", "backward_hist"]
logging.info("\n%s", history[[c for c in shown if c in history]].to_string())
