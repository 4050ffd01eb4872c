"""The timing stage (``workflow/rules/timing.smk``): a trained model's hidden states timed
against sequence length and t = a n^p fitted beside the paper's fits
(:mod:`~inn.experiment.timing.fits`), the implicit layer's solvers timed against GRU/LSTM
(:mod:`~inn.experiment.timing.benchmark`), the time of a step broken down into its parts
(:mod:`~inn.experiment.timing.breakdown`) and the other implicit-layer libraries run on the
same layer (:mod:`~inn.experiment.timing.peers`).

``inn.experiment.timing`` was the timing fits' module until the experiment was laid out by
stage; its names (``fit_power_law``, ``fit_table``, ...) are still found here, from
:mod:`~inn.experiment.timing.fits`, for a release.
"""

from inn._moved import old_module_names

__getattr__ = old_module_names(__name__, "inn.experiment.timing.fits")
