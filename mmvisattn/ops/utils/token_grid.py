"""The geometry of a row-major ``H x W`` token map: token coordinates, and cutting into square
windows and back (zero-padded bottom and right, cropped on return); :func:`add_rows_` is the adjoint
of gathering token rows."""
from typing import Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor


def grid_coordinates(hw_shape: Sequence[int], device=None) -> Tuple[Tensor, Tensor]:
    """Row and column of every token, ``(N,)`` each, row-major."""
    height, width = hw_shape
    # broadcasts, not repeat_interleave: ONNX opset 11 (mmdeploy's) has none for traced sizes
    rows = torch.arange(height, device=device)[:, None].expand(height, width).reshape(-1)
    cols = torch.arange(width, device=device)[None, :].expand(height, width).reshape(-1)
    return rows, cols


def window_grid(hw_shape: Sequence[int], window: int) -> Tuple[int, int]:
    """Rows and columns of ``window x window`` windows covering an ``H x W`` map (rounded up)."""
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


def add_rows_(tables: Tensor, index: Tensor, rows: Tensor) -> None:
    """Adjoint of ``tables.index_select(1, index)``: add ``rows`` ``(S, n, C)`` into ``(S, P, C)``
    ``tables`` at ``index`` by one ``index_add_`` on the flattened tables (the cheapest form on
    CPU)."""
    slices, positions, channels = tables.shape
    if slices > 1:
        index = (index + torch.arange(slices, device=index.device)[:, None] * positions).view(-1)
    tables.view(-1, channels).index_add_(0, index, rows.reshape(-1, channels))
