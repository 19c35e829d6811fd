"""The sliding-chunk pattern from token coordinates alone (arXiv:2103.15358, App. C): which key each
query meets through each visited chunk, and its relative-position index. The reference and the dense
backend use it, independently of the slot tables (:mod:`.layout`), so each checks the other.
"""
from typing import Iterator, Sequence, Tuple

import torch
from torch import Tensor

from ..utils.token_grid import grid_coordinates, window_grid
from .layout import NEIGHBOURS, visited_neighbours


def visited_pairs(hw_shape: Sequence[int], window: int, masking: str, mode: int,
                  device=None) -> Iterator[Tuple[Tensor, Tensor]]:
    """Per visited neighbour chunk: ``(N, N)`` whether key ``j`` is query ``i``'s there, and the
    pair's index into the ``(4w-1)^2`` table."""
    x, y = grid_coordinates(hw_shape, device)
    rows, cols = window_grid(hw_shape, window)
    side = 4 * window - 1
    for offset in visited_neighbours(mode):
        dx, dy = NEIGHBOURS[offset]
        # (N, 1) key chunk
        target_x, target_y = x[:, None] // window + dx, y[:, None] // window + dy
        inside = (target_x >= 0) & (target_x < rows) & (target_y >= 0) & (target_y < cols)
        if masking == 'cyclic':
            inside = torch.ones_like(inside)
        match = (
            inside
            & (x[None, :] // window == target_x % rows)
            & (y[None, :] // window == target_y % cols)
        )
        if masking == 'exact':
            match &= ((x[:, None]
                       - x[None, :]).abs() <= window) & ((y[:, None] - y[None, :]).abs() <= window)
        virtual_x = target_x * window + x[None, :] % window  # where the fast path places the key
        virtual_y = target_y * window + y[None, :] % window
        rel = (x[:, None] - virtual_x + 2 * window
               - 1) * side + (y[:, None] - virtual_y + 2 * window - 1)
        yield match, rel.clamp(0, side * side - 1)
