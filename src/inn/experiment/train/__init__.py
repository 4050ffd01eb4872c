"""The training stage (``workflow/rules/train.smk``): the training loop (:mod:`~inn.experiment.train.loop`,
``inn train``) with its settings, data, epochs, losses, solver tally, warm starts, resume states
and output folder (a module each, which the loop's docstring lists), NLTK's
averaged perceptron trained as the classical peer (:mod:`~inn.experiment.train.perceptron`) and
a trained model scored on its test split (:mod:`~inn.experiment.train.evaluate`).

``inn.experiment.train`` was the training loop's module until the experiment was laid out by
stage; its names (``train``, ``TrainConfig``, ...) are still found here, from
:mod:`~inn.experiment.train.loop`, for a release.
"""

from inn._moved import old_module_names

__getattr__ = old_module_names(__name__, "inn.experiment.train.loop")
