"""Paper Table 2 (``table2.tsv``): token accuracy per corpus and tagger over seeds, with the
unseen-word accuracy and the paper's WSJ figure, beside the reported figures of taggers that were
not run (a corpus's references, the Stanford tagger); each implicit model is compared with every
other tagger of its corpus.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from inn.errors import InnError
from inn.experiment.report import paper
from inn.experiment.report.comparisons import compare, run_predictions, scale_of, seed_summary
from inn.experiment.report.stats import UnitScores, unit_scores
from inn.models import MODELS, implicit_models, paper_task

COLUMNS = [
    "corpus",
    "model",
    "name",
    "accuracy",
    "accuracy_std",
    "accuracies",
    "unseen_accuracy",
    "seeds",
    "run",
    "paper_wsj_accuracy",
]


def table2(runs: pd.DataFrame, corpora: Iterable[str], comparisons: list | None = None) -> pd.DataFrame:
    """Paper Table 2: token accuracy per corpus and model (over seeds), with the paper's WSJ figures.

    ``comparisons`` receives a row per implicit model and other model of a corpus: the paired
    bootstrap difference in accuracy (points) over the test sentences, pooled over seeds.
    """
    comparisons = comparisons if comparisons is not None else []
    pos = runs[runs.task == paper_task(2)] if not runs.empty else runs
    corpora = list(corpora)
    unlisted = sorted(set(pos.dataset) - set(corpora)) if not pos.empty else []
    if unlisted:
        raise InnError(
            f"tagging runs of {', '.join(unlisted)} but --corpora names "
            f"{', '.join(corpora) or 'none'}: list every corpus to show (in report order)"
        )
    rows = []
    for corpus in corpora:
        rows += _corpus_rows(corpus, pos[pos.dataset == corpus] if not pos.empty else pos, comparisons)
    rows.append(
        {
            "corpus": "wsj",
            "model": "stanford",
            "name": "Stanford POS tagger",
            "seeds": 0,
            "run": "reported in the paper, not run",
            "paper_wsj_accuracy": paper.STANFORD_WSJ,
        }
    )
    return pd.DataFrame(rows, columns=COLUMNS)


def _corpus_rows(corpus: str, group: pd.DataFrame, comparisons: list) -> list[dict]:
    """A corpus's rows: each model run on it (in the registry's order), then the reported
    figures beside them; its comparisons appended to ``comparisons``."""
    order = list(MODELS)
    models = sorted(
        group.model.unique() if not group.empty else [], key=lambda m: order.index(m) if m in order else len(order)
    )
    rows, scored = [], {}
    for model in models:
        runs_ = group[group.model == model]
        summary = seed_summary(runs_["accuracy"], 2)
        unseen = runs_.get("unseen_accuracy", pd.Series(dtype=float)).dropna()
        rows.append(
            {
                "corpus": corpus,
                "model": model,
                "name": MODELS[model].display if model in MODELS else model,
                "accuracy": summary["mean"],
                "accuracy_std": summary["std"],
                "accuracies": summary["values"],
                "unseen_accuracy": float(unseen.mean()) if len(unseen) else np.nan,
                "seeds": summary["seeds"],
                "run": "ours",
                "paper_wsj_accuracy": paper.TABLE2_WSJ.get(model, np.nan),
            }
        )
        predictions = run_predictions(runs_)
        if predictions:
            scored[model] = unit_scores(predictions, "sentence", "correct")
    _compare_models(corpus, group, scored, comparisons)
    return rows + _reference_rows(corpus, group)


def _compare_models(corpus: str, group: pd.DataFrame, scored: dict[str, UnitScores], comparisons: list) -> None:
    """Each implicit model of a corpus against every other model scored on it."""
    implicit = implicit_models()
    for model in implicit:
        for baseline in scored:
            # Implicit models against each other once: the implicit LSTM against the INN.
            if (
                model in scored
                and baseline != model
                and not (baseline in implicit and implicit.index(baseline) > implicit.index(model))
            ):
                compare(
                    comparisons,
                    paper_task(2),
                    corpus,
                    model,
                    baseline,
                    scored[model],
                    scored[baseline],
                    100.0,
                    scale_of(group),
                )


def _reference_rows(corpus: str, group: pd.DataFrame) -> list[dict]:
    """The reported figures of a corpus's reference taggers (:data:`inn.experiment.report.paper.REFERENCES`)."""
    column, references = paper.REFERENCES.get(corpus, (None, {}))
    # Only beside runs that score the reference's tag column (runs evaluated before the
    # column was recorded are taken to be of the corpus's default, XPOS).
    if not set(group.get("tag_column", pd.Series(dtype=object)).fillna("xpos")) <= {column}:
        return []
    return [
        {
            "corpus": corpus,
            "model": "reference",
            "name": name,
            "accuracy": value,
            "seeds": 0,
            "run": "reported, not run",
        }
        for name, value in references.items()
    ]
