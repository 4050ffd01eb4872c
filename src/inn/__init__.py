"""Implicitly-defined neural networks for sequence labeling (Kazi & Thompson, ACL 2017).

Subpackages:

- :mod:`inn.data`: corpora readers, the tagger's input features, biased random walks.
- :mod:`inn.nn`: the implicit GRU layer (:class:`inn.nn.ImplicitGRU`) and the implicit LSTM
  (:class:`inn.nn.ImplicitLSTM`, the paper's future work).
- :mod:`inn.solvers`: the nonlinear and linear solvers behind the implicit layer.
- :mod:`inn.models`, :mod:`inn.perceptron`, :mod:`inn.checkpoints`: the taggers and their files;
  :mod:`inn.tagger`: tag new text with a trained tagger file (what ``inn tag`` runs);
  :mod:`inn.batches`, :mod:`inn.scoring`, :mod:`inn.io`, :mod:`inn.tables`: encoding, scores, output.
- :mod:`inn.experiment`: the drivers of the paper's experiments and the ``inn`` command line;
  the library imports nothing from it.
"""

from inn.errors import InnError

__all__ = ["InnError"]
__version__ = "0.1.0"
