"""Neural-network layers: the implicit GRU (:class:`ImplicitGRU`) and the implicit LSTM
(:class:`ImplicitLSTM`), each a cell on the shared machinery of :mod:`inn.nn.implicit_layer`."""

from inn.nn.implicit_gru import GRUSystem, ImplicitGRU
from inn.nn.implicit_lstm import ImplicitLSTM, LSTMSystem

__all__ = ["GRUSystem", "ImplicitGRU", "ImplicitLSTM", "LSTMSystem"]
