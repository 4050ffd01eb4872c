"""Shared fixtures: tiny sizes, float64 by default, deterministic seeds."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


def make_layer(input_size=5, hidden=6, scale=1.0, dtype=torch.float64, **options):
    """A small ImplicitGRU; ``scale`` multiplies the recurrent weights (harder systems)."""
    from inn.nn import ImplicitGRU

    layer = ImplicitGRU(input_size, hidden, **options).to(dtype)
    with torch.no_grad():
        for p in (layer.weight_pn, layer.weight_zr, layer.weight_c):
            p.mul_(scale)
    return layer


def make_batch(B=3, n=6, input_size=5, lengths=None, dtype=torch.float64):
    xi = torch.randn(B, n, input_size, dtype=dtype)
    mask = torch.ones(B, n, dtype=torch.bool)
    if lengths is not None:
        for b, length in enumerate(lengths):
            mask[b, length:] = False
    return xi, mask
