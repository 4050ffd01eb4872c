"""Implicitly-defined neural networks for sequence labeling (Kazi & Thompson, ACL 2017).

Subpackages:

- :mod:`inn.data`: corpora readers, the tagger's input features, biased random walks.
- :mod:`inn.nn`: the implicit GRU layer (:class:`inn.nn.ImplicitGRU`) and the implicit LSTM
  (:class:`inn.nn.ImplicitLSTM`, the paper's future work).
- :mod:`inn.solvers`: the nonlinear and linear solvers behind the implicit layer.
- :mod:`inn.models`, :mod:`inn.checkpoints`: the models and their files; :mod:`inn.batches`,
  :mod:`inn.io`, :mod:`inn.tables`: encoding and output.
- :mod:`inn.tagging`: the tagger: tag new text with a trained tagger file (what ``inn tag``
  runs), the tokenizer and the text formats, the averaged perceptron, the scores and the CoNLL
  2018 scorer, and the ``inn tag`` family of commands.
- :mod:`inn.experiment`: the drivers of the paper's experiments and the ``inn`` command line;
  the library imports nothing from it.
"""

from inn._moved import install as _answer_old_paths
from inn.errors import InnError

_answer_old_paths()  # the modules that moved keep their old import paths for a release

__all__ = ["InnError"]
__version__ = "0.1.0"
