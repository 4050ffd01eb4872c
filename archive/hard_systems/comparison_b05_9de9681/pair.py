"""The comparison-scale INN at b = 0.5, seeds 1-3, trained at 9de9681 (the adjoint's float64
fallback and compaction on) against the same runs at 136e5c0 (archive/comparison_walks_136e5c0/runs.tsv).

    python archive/hard_systems/comparison_b05_9de9681/pair.py

Per seed: test error, best dev error, epochs, CPU seconds an epoch, iterations and solves at
their limit from the archived metrics.json and history.tsv; then the test-error difference
paired by seed (same seed: same initialisation and batch order, only the solver differs) with
its t interval, and Welch's interval over the seeds. The 136e5c0 runs kept no predictions, so
no walk bootstrap: the intervals are the seeds' alone.
"""

import csv
import json
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

here = Path(__file__).parent
with open(here.parents[1] / "comparison_walks_136e5c0" / "runs.tsv") as handle:
    old = {int(r["seed"]): r for r in csv.DictReader(handle, delimiter="\t") if r["dataset"] == "b0.5" and r["model"] == "inn"}
new = {s: json.loads((here / f"seed{s}" / "metrics.json").read_text()) for s in (1, 2, 3)}
for s, run in new.items():
    h = pd.read_csv(here / f"seed{s}" / "history.tsv", sep="\t")
    print(f"seed {s}: test error {float(old[s]['error']):.6f} -> {run['error']:.6f}; best dev {float(old[s]['best_dev']):.6f} -> "
          f"{run['dev']['error']:.6f}; epochs (best) {old[s]['epochs']} ({old[s]['best_epoch']}) -> {run['epochs']} ({run['best_epoch']}); "
          f"CPU s an epoch {h.cpu_seconds.mean():.1f} ({h.cpu_seconds.min():.1f}-{h.cpu_seconds.max():.1f}); forward / adjoint "
          f"iterations {h.newton_iters.mean():.2f} / {h.backward_iters.mean():.2f}; at the limit {h.newton_limit.sum()} / "
          f"{h.backward_limit.sum()}; misses {h.nonconverged.sum()} / {h.backward_nonconverged.sum()}")
a = np.array([new[s]["error"] for s in new])
b = np.array([float(old[s]["error"]) for s in new])
d = a - b
half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
print(f"paired by seed: {d.mean():+.6f} [{d.mean() - half:+.6f}, {d.mean() + half:+.6f}]")
welch = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
print(f"Welch over the seeds: {a.mean() - b.mean():+.6f} [{welch.low:+.6f}, {welch.high:+.6f}]")
