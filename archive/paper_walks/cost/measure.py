"""CPU seconds of one training batch and one dev walk, for a Table 1 model at one point of its training.

Run with the library of the commit the runs were trained at (the pinned worktree's
environment), one thread, so that the figures are those of the archived runs' epochs:

    PYTHONPATH=out/pinned/a9e4c60/src OMP_NUM_THREADS=1 out/pinned/a9e4c60/.venv/bin/python \\
        archive/paper_walks/cost/measure.py --data out/pinned/a9e4c60/out/paper_walks/results/data/walks/b1.0 \\
        --model inn --state last.pt --batches 100 --out archive/paper_walks/cost/measured.tsv

It trains the model for ``--batches`` batches of the run's own training loop (``_train_epoch``,
its settings read from a state of the same run: loss, learning rate, clipping, warm starts) on
the first walks of the training split, from fresh weights (``--state`` left out: the run's
epoch 1) or from a kept state, and times the process's CPU (``time.process_time``). An INN
trained from a state is passed over the same batches twice: the first pass without warm
starts (the first epoch after a resume), the second with the first pass's solutions as warm
starts (every other epoch of a run), and each pass is a row. The dev walks' forward pass is
timed after. The machine's load average is recorded before and after.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import os
import time
from pathlib import Path

import torch

from inn import batches as B
from inn.checkpoints import read_checkpoint
from inn.experiment.runs import source_commit
from inn.experiment.train import TrainConfig, WarmStarts, _train_epoch, evaluate_loss, load_task_data
from inn.models import ModelConfig, build_model, parse_model_name

FIELDS = [
    "b",
    "model",
    "point",
    "epoch",
    "pass",
    "batches",
    "walks",
    "cpu_s",
    "wall_s",
    "cpu_s_per_batch",
    "newton_iters",
    "backward_iters",
    "dev_walks",
    "dev_cpu_s_per_walk",
    "load_before",
    "load_after",
    "threads",
    "commit",
]


def model_and_settings(args) -> tuple[torch.nn.Module, dict, int]:
    """The model at the measured point, the run's training settings and the state's epoch."""
    reference = read_checkpoint(args.settings_from or args.state)
    settings = dict(reference["meta"]["settings"]["training"])
    if args.state is None:  # fresh weights of the run's configuration (seed 1), or a b-LSTM of any size
        kind, size = parse_model_name(args.model)
        config = dict(reference["model_config"])
        config.update(kind=kind, **({"hidden_size": size} if size else {}))
        if kind != "inn":
            config.update(solver=None, solver_options={})
        torch.manual_seed(1)
        return build_model(ModelConfig(**config)), settings, 0
    state = read_checkpoint(args.state)
    model = build_model(ModelConfig(**state["model_config"]))
    model.load_state_dict(state["state_dict"])
    train_state = state.get("train_state") or {}
    settings["lr"] = train_state.get("lr", settings["lr"])
    return model, settings, int(train_state.get("epoch", state["meta"].get("epoch", 0)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="the run's walks folder (results/data/walks/b<b>)")
    parser.add_argument("--model", required=True, help="inn or bilstm-h<units>")
    parser.add_argument("--state", help="a kept state (last.pt, best.pt or a fixture); fresh weights without")
    parser.add_argument("--settings-from", help="a state of the same b whose training settings to use (fresh runs)")
    parser.add_argument("--point", default=None, help="a name for the point (default: fresh, or the state's epoch)")
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (1: as the archived runs' epochs)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, settings, epoch = model_and_settings(args)
    walks = args.batches * settings["batch_size"]
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    cfg = TrainConfig(**{**{k: v for k, v in settings.items() if k in names}, "max_train": walks, "max_dev": walks})
    data = load_task_data("walks", args.data, cfg)
    optimizer = torch.optim.SGD(model.parameters(), lr=settings["lr"])
    implicit = model.config.implicit
    warm = (
        WarmStarts([B.length(e) for e in data.train], model.rnn.state_size, torch.device("cpu"))
        if implicit and cfg.warm_start
        else None
    )
    passes = ["cold", "warm"] if warm is not None else ["cold"]
    rows = []
    for name in passes:
        load_before = os.getloadavg()[0]
        cpu, wall = time.process_time(), time.perf_counter()
        row = _train_epoch(
            model,
            optimizer,
            data,
            cfg,
            settings["lr"],
            epoch + 1,
            torch.device("cpu"),
            Path(args.out).with_suffix(".unused"),
            warm,
        )
        # the cold pass finds no solution kept (a batch none of whose walks was solved starts
        # from zero) and keeps its own, which start the warm pass's solves, as an epoch's do the next's
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        rows.append(
            {
                "pass": name,
                "cpu_s": cpu,
                "wall_s": wall,
                "load_before": load_before,
                "newton_iters": row.get("newton_iters", ""),
                "backward_iters": row.get("backward_iters", ""),
            }
        )
    dev_cpu = time.process_time()
    evaluate_loss(model, data.dev, settings["batch_size"], torch.device("cpu"))
    dev_cpu = (time.process_time() - dev_cpu) / len(data.dev)
    b = Path(args.data).name.removeprefix("b")
    exists = Path(args.out).exists()
    with open(args.out, "a", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, FIELDS, delimiter="\t")
        if not exists:
            writer.writeheader()
        for row in rows:
            writer.writerow(
                {
                    **row,
                    "b": b,
                    "model": args.model,
                    "point": args.point or ("fresh" if args.state is None else f"epoch{epoch}"),
                    "epoch": epoch,
                    "batches": args.batches,
                    "walks": walks,
                    "cpu_s_per_batch": row["cpu_s"] / args.batches,
                    "dev_walks": len(data.dev),
                    "dev_cpu_s_per_walk": dev_cpu,
                    "load_after": os.getloadavg()[0],
                    "threads": torch.get_num_threads(),
                    "commit": source_commit(),
                }
            )


if __name__ == "__main__":
    main()
