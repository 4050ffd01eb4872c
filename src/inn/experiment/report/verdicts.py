"""``verdict.tsv``: each of the paper's claims that the runs test, with its verdict read from the
interval of the comparison that tests it (:mod:`inn.experiment.report.comparisons`), and Table
1's claim judged as a whole over the b it was tested at.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from inn.experiment.report import paper
from inn.experiment.report.comparisons import COMPARED
from inn.models import MODELS, base_name, model_with_role, paper_baselines, paper_task

VERDICT_COLUMNS = [
    "claim",
    *COMPARED,
    "paper_difference",
    "difference",
    "low",
    "high",
    "interval",
    "model_seeds",
    "baseline_seeds",
    "verdict",
]


def verdicts(
    comparisons: pd.DataFrame, table1: pd.DataFrame | None = None, paper_corpora: Iterable[str] | None = None
) -> pd.DataFrame:
    """The paper's claims tested by our runs, one row per comparison that tests one.

    Claims: the INN's per-step error lies below the b-LSTM's for b <= 1 (Table 1; against the
    size of our sweep best on dev, and, where ``table1`` names another, against the size nearest
    the INN's parameter count), and the INN's accuracy above the BiGRU's and the BiLSTM's
    (Table 2). The INN is the registry's claimed model, the b-LSTM its swept baseline, the BiGRU
    and BiLSTM the paper's bidirectional baselines (:func:`inn.models.paper_baselines`); other
    models' comparisons are in ``comparisons`` and test no claim of the paper. The verdict reads
    the interval that decides ``distinguishable``: *reproduced* where it excludes zero in the
    paper's direction, *not reproduced* where it excludes zero in the other, *inconclusive*
    otherwise; with one seed on either side it is the test-set interval, and the verdict says
    "on one seed". Table 1's claim is also judged as a whole (:func:`_whole_claim`), over the b
    it was tested at. Table 2's claims are tested only on ``paper_corpora``, the paper's data
    and its declared stand-ins (each corpus's ``paper`` key; default: the built-in corpora's,
    :func:`inn.experiment.config_runs.paper_corpora`): another corpus's comparisons carry no verdict.
    """
    if paper_corpora is None:
        paper_corpora = default_paper_corpora()
    chosen = _chosen_sizes(table1)
    rows = []
    for r in comparisons.itertuples() if not comparisons.empty else []:
        claim = _claim(r, chosen, paper_corpora)
        if claim is not None:
            rows.append(_verdict_row(r, *claim))
    rows += _whole_claim(rows)
    return pd.DataFrame(rows, columns=VERDICT_COLUMNS)


def _chosen_sizes(table1: pd.DataFrame | None) -> dict:
    """The b-LSTM size chosen on dev per walk set (``b0.5``), from Table 1 (none without it)."""
    best_size = f"{model_with_role('swept')}_best_size"
    return (
        {}
        if table1 is None or table1.empty
        else {f"b{r.b}": getattr(r, best_size) for r in table1.itertuples() if best_size in table1}
    )


def _claim(r, chosen: dict, paper_corpora: Iterable[str]) -> tuple[str, int, float] | None:
    """The claim of the paper that comparison ``r`` tests: its words, its direction (-1: the
    INN's error below the baseline's, 1: its accuracy above) and the paper's own difference;
    None where it tests none."""
    claimed, swept = model_with_role("claimed"), model_with_role("swept")
    inn, blstm = MODELS[claimed].display, MODELS[swept].display  # "INN", "b-LSTM"
    if r.model != claimed:
        return None
    if r.task == paper_task(1) and base_name(str(r.baseline)) == swept:
        b = float(str(r.dataset).removeprefix("b"))
        if b > 1:
            return None
        claim = f"{inn} error below the {blstm}'s (b = {b:g})"
        size = int(str(r.baseline).removeprefix(f"{swept}-h"))
        best = chosen.get(r.dataset, chosen.get(f"b{b}"))
        if best is not None and not pd.isna(best) and size != int(best):
            claim += f", against the size nearest its parameter count ({size} units)"
        theirs = paper.TABLE1.get(b, {})
        return claim, -1, theirs.get(claimed, np.nan) - theirs.get(swept, np.nan)
    if r.task == paper_task(2) and r.baseline in paper_baselines() and r.dataset in paper_corpora:
        claim = f"{inn} accuracy above the {MODELS[r.baseline].display}'s ({r.dataset})"
        return claim, 1, paper.TABLE2_WSJ.get(claimed, np.nan) - paper.TABLE2_WSJ.get(r.baseline, np.nan)
    return None


def _verdict_row(r, claim: str, sign: int, paper_difference: float) -> dict:
    """The verdict on ``claim`` from the interval of comparison ``r``, read in the claim's
    direction (``sign``): reproduced where it excludes zero that way, not reproduced where it
    excludes zero the other way, inconclusive otherwise."""
    # the interval's bounds in the paper's direction: both above zero where the claim holds
    near, far = sorted((sign * r.low, sign * r.high))
    if near > 0:
        verdict = "reproduced"
    elif far < 0:
        verdict = "not reproduced"
    else:
        verdict = "inconclusive"
    if r.interval != "seeds and test set":
        verdict += " on one seed (test-set interval)"
    return {
        "claim": claim,
        **{column: getattr(r, column) for column in COMPARED},
        "paper_difference": paper_difference,
        "difference": r.difference,
        "low": r.low,
        "high": r.high,
        "interval": r.interval,
        "model_seeds": r.model_seeds,
        "baseline_seeds": r.baseline_seeds,
        "verdict": verdict,
        "p_value": getattr(r, "p_value", np.nan),
    }


def default_paper_corpora() -> list[str]:
    """The built-in corpora that are the paper's data or its stand-ins, as the schema declares them."""
    from inn.experiment.config_schema import SCHEMA, load_schema

    corpora = load_schema(SCHEMA)["properties"]["corpora"]["properties"]
    return [
        name
        for name, record in corpora.items()
        if record.get("properties", {}).get("paper", {}).get("default", "none") != "none"
    ]


def _whole_claim(rows: list[dict]) -> list[dict]:
    """Table 1's claim as a whole, ``the INN's error below the b-LSTM's for b <= 1``, from its
    per-b rows against the size chosen on dev: how many b it was tested at (so how many tests it
    rests on), at how many each verdict fell, and at how many it holds once the tests are
    corrected for their number (Holm's step-down at 5% on the rows' two-sided p-values, each in
    the paper's direction). Nothing while fewer than two b were tested."""
    tested = [r for r in rows if r["task"] == paper_task(1) and "nearest its parameter count" not in r["claim"]]
    if len({r["dataset"] for r in tested}) < 2:
        return []
    counts = pd.Series([r["verdict"].split(" on one seed")[0] for r in tested]).value_counts()
    holding, order = 0, sorted(tested, key=lambda r: r["p_value"])
    for rank, r in enumerate(order):
        if r["p_value"] < 0.05 / (len(order) - rank) and r["difference"] < 0:
            holding += 1
        else:
            break
    b_values = ", ".join(str(r["dataset"]).removeprefix("b") for r in sorted(tested, key=lambda r: r["dataset"]))
    verdict = (
        f"{len(tested)} tests (b = {b_values}): "
        + ", ".join(
            f"{name} at {counts[name]}" for name in ("reproduced", "not reproduced", "inconclusive") if name in counts
        )
        + f"; {holding} of {len(tested)} hold after Holm's correction for {len(tested)} tests"
        + ("; some rest on one seed" if any("on one seed" in r["verdict"] for r in tested) else "")
    )
    claimed, swept = model_with_role("claimed"), model_with_role("swept")
    return [
        {
            "claim": f"{MODELS[claimed].display} error below the {MODELS[swept].display}'s for b <= 1, as a whole",
            "task": paper_task(1),
            "dataset": "all tested",
            "scale": ",".join(sorted({str(r["scale"]) for r in tested})),
            "model": claimed,
            "baseline": swept,
            "metric": "error",
            "paper_difference": np.nan,
            "difference": np.nan,
            "low": np.nan,
            "high": np.nan,
            "interval": "per b, above",
            "model_seeds": min(r["model_seeds"] for r in tested),
            "baseline_seeds": min(r["baseline_seeds"] for r in tested),
            "verdict": verdict,
            "p_value": np.nan,
        }
    ]
