"""The checks that the runs a table pools or compares are alike: the seeds of one model are
runs of one setup, the models of one data set learnt from the same data, and a walk set's floor
is that of the walks its runs learnt from. Otherwise a table would average or compare unlike
runs without a word.
"""

from __future__ import annotations

import pandas as pd

from inn.errors import InnError
from inn.models import model_with_role, paper_task


def check_seeds_alike(runs: pd.DataFrame) -> None:
    """The seeds of one model on one data set are pooled, and the models of one data set are
    compared: the seeds must be runs of one setup (one scale, one size), and every run of a data
    set must have learnt from the same data (walks of another ``dim`` or ``direction`` carry the
    same labels, so only the data's fingerprint tells them apart). Otherwise a table would
    average or compare unlike runs without a word. (Not the parameter count: the perceptron's
    grows with what its seed's passes saw.) A field an older run did not record is not compared."""
    swept = model_with_role("swept")
    for (task, dataset, base), group in runs.groupby(["task", "dataset", "base_model"]):
        names = sorted(group.model.unique())
        if len(names) > 1 and not (task == paper_task(1) and base == swept):  # only Table 1's b-LSTM is swept
            raise InnError(
                f"{task} {dataset}: runs of {', '.join(names)} would share the {base} row; only the "
                "walks' b-LSTM is a sweep of sizes: collect each size of the others separately"
            )
        for size, named in group.groupby("size"):
            if named.model.nunique() > 1:
                raise InnError(
                    f"{task} {dataset}: {', '.join(sorted(named.model.unique()))} are one size "
                    f"({size:g} units) under two names, so their seeds would be pooled twice over; "
                    "collect the runs of one name"
                )
    for (task, dataset, model), group in runs.groupby(["task", "dataset", "model"]):
        for column, what in (("scale", "scales"), ("size", "sizes"), ("data_fingerprint", "data (fingerprints)")):
            values = group[column].dropna().unique() if column in group else []
            if len(values) > 1:
                seeds = ", ".join(f"seed {r.seed}: {getattr(r, column)}" for r in group.itertuples())
                raise InnError(
                    f"{task} {dataset} {model}: its seeds come from different {what} ({seeds}); "
                    "collect the runs of each setup separately"
                )
    if "data_fingerprint" in runs:
        for (task, dataset), group in runs.dropna(subset=["data_fingerprint"]).groupby(["task", "dataset"]):
            if group.data_fingerprint.nunique() > 1:
                models = ", ".join(f"{m}: {f}" for m, f in group.groupby("model").data_fingerprint.first().items())
                raise InnError(
                    f"{task} {dataset}: its runs learnt from different data ({models}), so their "
                    "comparisons would pair unlike test sets; collect the runs of each data set separately"
                )


def check_floors(runs: pd.DataFrame, floors: dict[str, tuple[dict, pd.DataFrame | None]]) -> None:
    """A walk set's floor must be that of the walks its runs learnt from (where both say which:
    floors written before ``data_fingerprint`` was recorded are not checked)."""
    if "data_fingerprint" not in runs:
        return
    walks = runs[runs.task == paper_task(1)].dropna(subset=["data_fingerprint"])
    for dataset, group in walks.groupby("dataset"):
        floor = (floors.get(dataset) or ({}, None))[0].get("data_fingerprint")
        if isinstance(floor, str) and floor not in set(group.data_fingerprint):
            raise InnError(
                f"walks {dataset}: its floor was computed on other walks (data {floor}) than its runs "
                f"learnt from ({group.data_fingerprint.iloc[0]}); compute the floor of the runs' walk "
                "set (inn walk-floor), or collect the runs of each walk set separately"
            )
