"""Diagnosis of the stalled adjoint solves of the b = 0.5 INN fixture, at the float32 states training has.
Usage: python diagnose.py SWEEP.pt MAX_BATCHES OUT.pt (prints one line per sequence)."""
import sys, time, math, warnings, copy, torch
import torch.nn.functional as Fn
import inn.solvers as S
from inn.checkpoints import load_checkpoint
from inn.solvers import ADJOINT_SOLVERS
from inn.solvers.block_tridiagonal import block_tridiagonal_solve, block_tridiagonal_solve_transposed
from inn.solvers._common import batch_norm
torch.set_num_threads(1)
warnings.simplefilter("ignore")
model, meta = load_checkpoint('tests/fixtures/walks_b05_inn_epoch5.pt')
m64 = copy.deepcopy(model).double()
sw = torch.load(sys.argv[1], weights_only=False)
maxcases = int(sys.argv[2]) if len(sys.argv) > 2 else 99
trace = []
orig_step = S._adjoint_step
def rec_step(vjp, g, cp, scale):
    f = orig_step(vjp, g, cp, scale)
    def fmap(u):
        out = f(u); trace.append(out[1].clone()); return out
    return fmap
S._adjoint_step = rec_step

def one(s, j, label):
    x, y, mask, n = s["x"], s["y"], s["mask"], s["n"]
    # the batch as training solves it (float32, default options), then sequence j alone
    with torch.no_grad():
        Hb = model.rnn(x, mask)
    H32 = model.rnn.last_solution[j:j+1]
    sy32 = model.rnn.system(x[j:j+1], mask[j:j+1]); lin32 = sy32.linearize(H32)
    sy64 = m64.rnn.system(x[j:j+1].double(), mask[j:j+1]); lin64 = sy64.linearize(H32.double())
    Hg = H32.double().clone().requires_grad_(True)
    loss = (Fn.binary_cross_entropy_with_logits(m64.output(Hg).squeeze(-1), y[j:j+1].double(), reduction="none")).sum()
    (g,) = torch.autograd.grad(loss, Hg)
    cache = [lin64.blocks(t) for t in range(n)]
    blocks = lambda t: cache[t]
    t0 = time.process_time()
    u = block_tridiagonal_solve_transposed(lambda t: tuple(b for b in lin64.blocks(t)), g)
    t_direct = time.process_time() - t0
    res64 = float(batch_norm(u - lin64.vjp(u) - g) / batch_norm(g))
    u32 = u.float()
    res32_of_direct = float(batch_norm(u32 - lin32.vjp(u32) - g.float()) / batch_norm(g.float()))
    v = torch.randn(g.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    for _ in range(8):
        w = block_tridiagonal_solve(blocks, block_tridiagonal_solve_transposed(blocks, v))
        lam = float(w.norm() / v.norm()); v = w / w.norm()
    smin = 1 / math.sqrt(lam)
    vpos = v[0].norm(dim=-1)
    lower, upper = lin64.copy  # (1, n, K): the copy couplings to h_{t-1}, h_{t+1}
    loop = upper[0, :-1] * lower[0, 1:]  # gain of the 2-cycle t <-> t+1 per unit
    gain, where = loop.max(dim=-1)
    tpair = int(gain.argmax()); unit = int(where[tpair])
    res = {}
    for name, lin, gd, lp in (("f32", lin32, g.float(), "auto"), ("f64", lin64, g, False)):
        trace.clear()
        t0 = time.process_time()
        ud, sd = ADJOINT_SOLVERS["anderson"](lin, gd, tol=1e-4, max_iter=200, low_precision=lp)
        tt = time.process_time() - t0
        tr = torch.stack(trace).squeeze(-1)
        res[name] = (int(sd.newton_iterations[0]), float(sd.residual[0]), tt, tr)
        if name == "f32":
            r = (gd + lin.vjp(ud) - ud)[0].norm(dim=-1); rpos = int(r.argmax()); share = float((r.pow(2) / r.pow(2).sum()).sort(descending=True)[0][:2].sum())
    tr = res["f32"][3]
    checkpoints = [float(tr[:k].min()) for k in (10, 20, 40, 80, 160, len(tr)) if k <= len(tr)]
    print(f"{label} n={n} | adj f32 {res['f32'][0]} its res {res['f32'][1]:.1e} {res['f32'][2]:.2f}s best-after-10/20/40/80/160/all "
          f"{' '.join(f'{c:.0e}' for c in checkpoints)} | f64 Anderson {res['f64'][0]} its res {res['f64'][1]:.1e} {res['f64'][2]:.2f}s"
          f" | direct f64 {t_direct:.3f}s res64 {res64:.0e} res32 {res32_of_direct:.1e} | smin(I-J) {smin:.1e} |u|/|g| {float(u.norm()/g.norm()):.0f}"
          f" | f32 resid at pos {rpos} (top2 share {share:.2f}), smallest sing. vector at pos {int(vpos.argmax())} (top2 share {float((vpos.pow(2)/vpos.pow(2).sum()).sort(descending=True)[0][:2].sum()):.2f})"
          f" | max copy loop gain {float(gain.max()):.5f} at t={tpair}<->{tpair+1} unit {unit} (s_t->next {float(upper[0,tpair,unit]):.4f}, s_t+1->prev {float(lower[0,tpair+1,unit]):.4f})", flush=True)
    return dict(label=label, n=n, f32_its=res['f32'][0], f32_res=res['f32'][1], f32_s=res['f32'][2], f64_its=res['f64'][0], f64_res=res['f64'][1], f64_s=res['f64'][2],
                direct_s=t_direct, direct_res64=res64, direct_res32=res32_of_direct, smin=smin, ug=float(u.norm()/g.norm()), gain=float(gain.max()), rpos=rpos, vpos=int(vpos.argmax()), tpair=tpair, trace=tr)

out = []
cases = 0
for s in sw["stalled"]:
    bad = ((s["bcode"] != 0)).nonzero().flatten().tolist()
    good = [jj for jj in range(20) if jj not in bad][:2]
    for j in bad:
        out.append(one(s, j, f"STALL b{s['i']}#{j} bits={int(s['bits'][j])}"))
    for j in good:
        out.append(one(s, j, f"ok    b{s['i']}#{j} bits={int(s['bits'][j])}"))
    cases += 1
    torch.save(out, sys.argv[3])
    if cases >= maxcases: break
