"""The feature map's passes in torch (``impl='torch'``; arXiv:2110.02453, Eq. 13): the forward
without a graph, the backward written out, recomputing ``W1 s x`` and its sine and cosine once by
chunks of rows (:func:`~mmvisattn.ops.utils.recompute.step_budget`), four transcendentals where a
recomputed reference takes six.
"""
from typing import Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ..utils.recompute import CHUNK_TOKENS, runs, step_budget
from .passes import run_passes


def _rows(x: Tensor) -> Tensor:
    return x.reshape(-1, x.shape[-1])


def torch_forward(x: Tensor, w1: Tensor, w2: Tensor, b2: Tensor, scale: float) -> Tensor:
    """Eq. 13 without a graph."""
    with torch.no_grad():
        projected = (x * scale) @ w1.t()
        return F.relu(torch.cat([projected.sin(), projected.cos()], dim=-1) @ w2.t() + b2)


def torch_backward(x: Tensor, w1: Tensor, w2: Tensor, features: Tensor, grad_out: Tensor,
                   scale: float) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """The gradients, ``W1 s x`` and its sine and cosine recomputed by chunks of rows."""
    shape = x.shape
    # rows of tokens: one copy of a permuted input, then every product is a plain matrix product
    x, features, grad_out = (_rows(t) for t in (x, features, grad_out))
    chunks = runs(x.shape[0], step_budget(CHUNK_TOKENS, x.device, item_elements=2 * w1.shape[0]))
    if len(chunks) == 1:  # a GPU's budget: no slices, nothing summed
        grad_x, grad_w1, grad_w2, grad_b2 = _chunk_gradients(x, w1, w2, features, grad_out, scale)
        return grad_x.view(shape), grad_w1, grad_w2, grad_b2
    parts = [_chunk_gradients(x[rows], w1, w2, features[rows], grad_out[rows],
                              scale) for rows in chunks]
    grad_x = torch.cat([part[0] for part in parts])
    return (grad_x.view(shape), *(torch.stack(grads).sum(dim=0) for grads in list(zip(*parts))[1:]))


def _chunk_gradients(x: Tensor, w1: Tensor, w2: Tensor, features: Tensor, grad_out: Tensor,
                     scale: float) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """The four gradients from rows ``x``: ``dx`` and this chunk's share of ``dW1, dW2, db2``."""
    num_features = w1.shape[0]
    scaled = x * scale
    projected = scaled @ w1.t()
    sin, cos = projected.sin(), projected.cos()
    grad_pre = grad_out * (features > 0)  # through the ReLU
    grad_trig = grad_pre @ w2
    grad_projected = grad_trig[:, :num_features] * cos - grad_trig[:, num_features:] * sin
    return ((grad_projected @ w1) * scale, grad_projected.t() @ scaled,
            grad_pre.t() @ torch.cat([sin, cos], dim=1), grad_pre.sum(dim=0))


def trig_relu_features_torch(x: Tensor, w1: Tensor, w2: Tensor, b2: Tensor, scale: float) -> Tensor:
    """Eq. 13 with the torch passes."""
    return run_passes(x, w1, w2, b2, scale, torch_forward, torch_backward)
