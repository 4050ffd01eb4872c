"""The stalled batches of sweep.py backward with the default adjoint and the float64 / direct fallbacks.
Usage: python fallback.py SWEEP.pt BATCHES"""
import sys, time, warnings, torch
from inn.checkpoints import load_checkpoint
from inn.experiment.train import token_losses
torch.set_num_threads(1); warnings.simplefilter("ignore")
model, meta = load_checkpoint('tests/fixtures/walks_b05_inn_epoch5.pt'); model.train()
sw = torch.load(sys.argv[1], weights_only=False)
for s in sw["stalled"][: int(sys.argv[2])]:
    batch = dict(x=s["x"], y=s["y"], mask=s["mask"])
    for fb in (None, "float64", "direct"):
        model.rnn.backward_options = {} if fb is None else {"backward_fallback": fb}
        model.zero_grad()
        loss, count, _ = token_losses(model, batch)
        t0 = time.process_time(); (loss / count).backward(); t = time.process_time() - t0
        bs = model.rnn.last_backward_stats
        grad = torch.cat([p.grad.flatten() for p in model.rnn.parameters()])
        if fb is None: ref = grad
        print(s["i"], s["n"], fb, f"bwd {t:.3f}s its mean {bs.newton_iterations.float().mean():.1f} max {int(bs.newton_iterations.max())} failed {bs.num_failed} res {float(bs.residual.max()):.1e} fallback {bs.extra.get('fallback', 0)} grad diff vs default {float((grad-ref).norm()/ref.norm()):.2e}", flush=True)
