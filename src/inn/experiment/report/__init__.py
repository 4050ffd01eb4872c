"""The report stage (``workflow/rules/report.smk``): every run's metrics collected into Tables
1 and 2 (``inn collect``, :mod:`~inn.experiment.report.collect`: the runs found and read by
:mod:`~inn.experiment.report.runs` and checked alike by :mod:`~inn.experiment.report.checks`;
:mod:`~inn.experiment.report.table1`, :mod:`~inn.experiment.report.table2`, their paired
:mod:`~inn.experiment.report.comparisons` and the paper's claims'
:mod:`~inn.experiment.report.verdicts`), their statistics (:mod:`~inn.experiment.report.stats`),
the tables as views for HTML and Markdown (:mod:`~inn.experiment.report.views`,
:mod:`~inn.experiment.report.tables`), the CPU cost of the walks runs
(:mod:`~inn.experiment.report.cost`), the paper's published numbers
(:mod:`~inn.experiment.report.paper`) and the HTML report (:mod:`~inn.experiment.report.html`,
with its :mod:`~inn.experiment.report.figures` and :mod:`~inn.experiment.report.provenance`).

``inn.experiment.report`` was the HTML report's module until the experiment was laid out by
stage; its names (``render``, ``main``, ...) are still found here, from
:mod:`~inn.experiment.report.html`, for a release.
"""

from inn._moved import old_module_names

__getattr__ = old_module_names(__name__, "inn.experiment.report.html")
