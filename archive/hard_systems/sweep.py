"""Run fresh b = 0.5 training batches (n = 1 + 7i mod 40) through the epoch-5 walks INN fixture,
forward and backward with its token loss; keep every batch with a solve that missed tol.
Usage: python sweep.py BATCHES OUT.pt"""
import sys, time, warnings, torch
from inn.checkpoints import load_checkpoint
from inn.batches import collate
from inn.data.walk import generate_walks
from inn.experiment.train import token_losses
torch.set_num_threads(1)
warnings.simplefilter("ignore")
model, meta = load_checkpoint('tests/fixtures/walks_b05_inn_epoch5.pt')
model.train()
nb = int(sys.argv[1]); out = sys.argv[2]
stalled = []; rows = []
t0 = time.process_time()
for i in range(nb):
    n = 1 + (i * 7) % 40
    walks = generate_walks(20, 0.5, 10, 10_000 + i, max_len=n, min_len=n)
    batch = collate([{"x": x, "y": y} for x, y in walks])
    model.zero_grad()
    loss, count, _ = token_losses(model, batch)
    (loss / count).backward()
    fs, bs = model.rnn.last_stats, model.rnn.last_backward_stats
    rows.append((i, n, fs.newton_iterations.tolist(), fs.code.tolist(), bs.newton_iterations.tolist(), bs.code.tolist(), bs.residual.tolist()))
    bad = (bs.code != 0) | (fs.code != 0)
    if bad.any():
        stalled.append(dict(i=i, n=n, x=batch["x"], y=batch["y"], mask=batch["mask"], fcode=fs.code, bcode=bs.code, bits=bs.newton_iterations, fits=fs.newton_iterations, bres=bs.residual))
        torch.save(dict(rows=rows, stalled=stalled), out)
        print(i, n, "fwd its", fs.newton_iterations.max().item(), fs.code.tolist().count(0), "bwd", bs.newton_iterations.tolist(), bs.code.tolist(), flush=True)

print("cpu s", time.process_time() - t0)
torch.save(dict(rows=rows, stalled=stalled), out)
