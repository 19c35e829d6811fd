"""The local part of ripple attention in dense form, for maps small against ``R_max``
(arXiv:2110.02453, Eq. 4).

Where the ``(2 R_max - 1)^2`` window covers much of the map, one ``N x N`` product per block of
queries beats :mod:`.pytorch`'s tiles: ``beta`` is gathered by each pair's Chebyshev group (zero
from ``R_max`` on), key and value gradients are matrix products. It saves what the tiles save, holds
at most :data:`SCORE_BUDGET` scores a block on CPU and caches an ``8 N^2``-byte index;
:func:`dense_is_faster` is the CPU crossover ``auto`` follows.
"""
from functools import lru_cache
from typing import List, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ..utils.recompute import runs, step_budget
from ..utils.tracing import onnx_constants
from .local_global import chebyshev_distances, local_plus_global, tiled_cost

SCORE_BUDGET = 1 << 20  # score entries of one block of queries (all slices of the call) on CPU
# dense while N <= DENSE_CROSSOVER * tiled_cost(R_max), against the C++ tiles on CPU
DENSE_CROSSOVER = 0.8


def dense_is_faster(hw_shape: Sequence[int], r_max: int) -> bool:
    """Whether the dense local part beats the tiled one on this map (measured on CPU)."""
    return hw_shape[0] * hw_shape[1] <= DENSE_CROSSOVER * tiled_cost(r_max)


@lru_cache(maxsize=4)
def pair_positions(hw_shape: Tuple[int, int], r_max: int, device: torch.device) -> Tensor:
    """``(N * N,)`` flat positions in the ``(N, R_max + 1)`` weights of every (query, key) pair;
    cached, as a map recurs every layer and step."""
    with onnx_constants():  # of the map size alone: constants of an exported graph
        group = chebyshev_distances(hw_shape, device).clamp_(max=r_max)
        group += torch.arange(hw_shape[0] * hw_shape[1], device=device)[:, None] * (r_max + 1)
    return group.view(-1)


def _blocks(q: Tensor) -> List[slice]:
    """Query blocks of ``(S, N, D)`` ``q`` whose scores (all slices) fit the step budget."""
    slices, tokens = q.shape[:2]
    return runs(tokens, max(1, step_budget(SCORE_BUDGET, q.device) // (slices * tokens)))


def _block_positions(positions: Tensor, rows: slice, tokens: int) -> Tensor:
    """The :func:`pair_positions` of the pairs of the query ``rows``."""
    return positions[rows.start * tokens:rows.stop * tokens]


def _pair_weights(beta_flat: Tensor, index: Tensor, tokens: int) -> Tensor:
    """``(S, n, N)`` ``beta`` of the pairs at ``index`` (a block of queries)."""
    return beta_flat.index_select(1, index).view(beta_flat.shape[0], -1, tokens)


def _weights_table(beta: Tensor) -> Tensor:
    """``(S, N, R_max)`` -> ``(S, N * (R_max + 1))``: a zero weight appended for the far groups."""
    return F.pad(beta, (0, 1)).view(beta.shape[0], -1)


def dense_forward(q: Tensor, k: Tensor, v: Tensor, beta: Tensor,
                  hw_shape: Sequence[int]) -> Tuple[Tensor, Tensor]:
    """The local part's ``num``, ``den`` as :func:`.pytorch.tiled_forward`, by query blocks."""
    slices, tokens = q.shape[:2]
    positions = pair_positions(tuple(hw_shape), beta.shape[-1], q.device)
    table = _weights_table(beta)
    num, den = q.new_empty(*v.shape), q.new_empty(slices, tokens, 1)
    for rows in _blocks(q):
        weights = _pair_weights(table, _block_positions(positions, rows, tokens), tokens)
        weighted = (q[:, rows] @ k.transpose(1, 2)).mul_(weights)
        num[:, rows] = weighted @ v
        den[:, rows] = weighted.sum(dim=-1, keepdim=True)
    return num, den


def dense_backward(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, hw_shape: Sequence[int],
                   grad_num: Tensor, grad_den: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """Gradients of :func:`dense_forward` for ``q, k, v, beta``, scores recomputed by blocks."""
    slices, tokens = q.shape[:2]
    r_max = beta.shape[-1]
    positions = pair_positions(tuple(hw_shape), r_max, q.device)
    table = _weights_table(beta)
    grad_q, grad_k, grad_v = torch.empty_like(q), torch.zeros_like(k), torch.zeros_like(v)
    grad_table = torch.zeros_like(table)
    for rows in _blocks(q):
        index = _block_positions(positions, rows, tokens)
        weights = _pair_weights(table, index, tokens)
        q_part, num_part = q[:, rows], grad_num[:, rows]
        scores = q_part @ k.transpose(1, 2)
        grad_weighted = num_part @ v.transpose(1, 2)
        grad_weighted += grad_den[:, rows]
        # the pairs' weight gradients summed by group: the adjoint of the gather
        grad_table.index_add_(1, index, (grad_weighted * scores).view(slices, -1))
        grad_scores = grad_weighted.mul_(weights)
        grad_q[:, rows] = grad_scores @ k
        grad_k.baddbmm_(grad_scores.transpose(1, 2), q_part)
        grad_v.baddbmm_(scores.mul_(weights).transpose(1, 2), num_part)
    return grad_q, grad_k, grad_v, grad_table.view(slices, tokens, r_max + 1)[..., :r_max]


def ripple_attention_dense(q: Tensor, k: Tensor, v: Tensor, logits: Tensor, hw_shape: Sequence[int],
                           tau: float, eps: float) -> Tensor:
    """Ripple attention with the local part in dense blocks."""
    return local_plus_global(q, k, v, logits, hw_shape, tau, eps, dense_forward, dense_backward)
