"""Neural-network layers: :class:`ImplicitSequence`, which makes any cell
f(x_t, h_{t-1}, h_{t+1}) an implicit layer (:mod:`inn.nn.sequence`, on the equations of
:mod:`inn.nn.system`), and on it the implicit GRU (:class:`ImplicitGRU`, the paper's) and the
implicit LSTM (:class:`ImplicitLSTM`)."""

from inn.nn.implicit_gru import GRUCell, ImplicitGRU
from inn.nn.implicit_lstm import ImplicitLSTM, LSTMCell
from inn.nn.sequence import Cell, ImplicitSequence

__all__ = ["Cell", "GRUCell", "ImplicitGRU", "ImplicitLSTM", "ImplicitSequence", "LSTMCell"]
