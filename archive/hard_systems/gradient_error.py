"""The gradient training gets on the trained walks fixtures, against a 100x tighter solve.

    python gradient_error.py FIXTURE N BATCHES OPTIONS_JSON...

For each JSON object of layer options (``backward_*`` ones go to the backward; ``{}`` is the
layer's defaults), the same BATCHES fresh b = 0.5 training batches of 20 walks of N steps
(seed 1, ``inn.experiment.breakdown.training_batches``) through the whole model with its token
loss, as the trainer runs them: the relative error ||g - g*|| / ||g*|| of the gradient of every
parameter, where g* is the float64 copy of the model solved forward and adjoint to tol 1e-6
(100x the training tol 1e-4) with up to 1,000 iterations. Printed per option set: the median,
90th percentile and largest error over the batches, and over the batches where a float32 solve
was not enough (a forward or adjoint solve of a sequence missed tol, or a fallback solved it
again in float64): how many there were and their largest error. E.g.

    python gradient_error.py tests/fixtures/walks_b05_inn_epoch5.pt 40 30 \\
        '{"compact": false, "fallback": null, "backward_fallback": null}' '{}'
"""

import copy
import json
import sys
import warnings

import torch

from inn.experiment.breakdown import fixture_batches
from inn.experiment.train import token_losses
from inn.nn.implicit_function import BACKWARD_OPTIONS, check_backward_options
from inn.solvers import ConvergenceWarning, check_options

torch.set_num_threads(1)
warnings.simplefilter("ignore", ConvergenceWarning)
path, n, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
model, meta, batches = fixture_batches(path, n, count)


def gradient(net, batch: dict) -> tuple[torch.Tensor, bool]:
    """The flattened parameter gradient of the token loss, and whether a float32 solve was not
    enough (a sequence missed tol, or went to the float64 fallback)."""
    net.zero_grad(set_to_none=True)
    loss, tokens, _ = token_losses(net, batch)
    (loss / tokens).backward()
    fs, bs = net.rnn.last_stats, net.rnn.last_backward_stats
    stalled = bool((fs.code != 0).any() or (bs.code != 0).any() or fs.extra.get("fallback", 0)
                   or bs.extra.get("fallback", 0))
    return torch.cat([p.grad.flatten().double() for p in net.parameters() if p.grad is not None]), stalled


reference = copy.deepcopy(model).double()
reference.rnn.options = {**reference.rnn.options, "tol": 1e-6, "max_iter": 1000}
reference.rnn.backward_options = {**reference.rnn.backward_options, "backward_tol": 1e-6,
                                  "backward_max_iter": 1000}
exact = []
for batch in batches:
    as64 = {key: value.double() if value.is_floating_point() else value for key, value in batch.items()}
    g, missed = gradient(reference, as64)
    if missed:
        sys.exit(f"the float64 reference missed tol 1e-6 on a batch of {path}: no reference to compare with")
    exact.append(g)

forward, backward = dict(model.rnn.options), dict(model.rnn.backward_options)
for arg in sys.argv[4:]:
    extra = json.loads(arg)
    model.rnn.options = {**forward, **{k: v for k, v in extra.items() if k not in BACKWARD_OPTIONS}}
    model.rnn.backward_options = {**backward, **{k: v for k, v in extra.items() if k in BACKWARD_OPTIONS}}
    check_options(model.rnn.solver, model.rnn.options)
    check_backward_options(model.rnn.backward_options)
    errors, stalled = [], []
    for batch, g_star in zip(batches, exact):
        g, missed = gradient(model, batch)
        errors.append(float((g - g_star).norm() / g_star.norm()))
        stalled.append(missed)
    e = torch.tensor(errors)
    worst_stalled = max((x for x, s in zip(errors, stalled) if s), default=float("nan"))
    sys.stdout.write(f"n={n} {arg:62s} gradient error median {e.median():.2e} 90% {e.quantile(0.9):.2e} "
                     f"max {e.max():.2e}; batches where float32 missed or handed over {sum(stalled)} of {count}, "
                     f"their max {worst_stalled:.2e}\n")
