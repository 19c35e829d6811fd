"""The geometry of a row-major ``H x W`` token map, shared by the ops and modules: the coordinates
of its tokens, and its cutting into square windows and back (sliding-chunk attention's chunks and
ripple attention's tiles). Windows zero-pad the map at the bottom and the right; the padding is
cropped on the way back."""
from typing import Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor


def grid_coordinates(hw_shape: Sequence[int], device=None) -> Tuple[Tensor, Tensor]:
    """Row and column of every token, ``(N,)`` each, row-major."""
    height, width = hw_shape
    rows = torch.arange(height, device=device).repeat_interleave(width)
    cols = torch.arange(width, device=device).repeat(height)
    return rows, cols


def window_grid(hw_shape: Sequence[int], window: int) -> Tuple[int, int]:
    """Rows and columns of ``window x window`` windows covering an ``H x W`` map (ceiling division)."""
    return -(-hw_shape[0] // window), -(-hw_shape[1] // window)


def to_windows(x: Tensor, hw_shape: Sequence[int], window: int) -> Tensor:
    """``(S, H * W, C)`` -> ``(S, L, window^2, C)``, ``L`` windows in row-major order."""
    (height, width), channels = hw_shape, x.shape[-1]
    rows, cols = window_grid(hw_shape, window)
    grid = F.pad(x.reshape(-1, height, width, channels),
                 (0, 0, 0, cols * window - width, 0, rows * window - height))
    grid = grid.reshape(-1, rows, window, cols, window, channels).transpose(2, 3)
    return grid.reshape(-1, rows * cols, window * window, channels)


def from_windows(windows: Tensor, hw_shape: Sequence[int], window: int) -> Tensor:
    """Inverse of :func:`to_windows`: ``(S, L, window^2, C)`` (or ``(S * L, window^2, C)``) ->
    ``(S, H * W, C)``."""
    (height, width), channels = hw_shape, windows.shape[-1]
    rows, cols = window_grid(hw_shape, window)
    grid = windows.reshape(-1, rows, cols, window, window, channels).transpose(2, 3)
    grid = grid.reshape(-1, rows * window, cols * window, channels)[:, :height, :width]
    return grid.reshape(-1, height * width, channels)
