"""Neural-network layers: the implicit GRU (:class:`ImplicitGRU`)."""

from inn.nn.implicit_gru import GRUSystem, ImplicitGRU

__all__ = ["GRUSystem", "ImplicitGRU"]
