"""Position-based attention ``Phi_p`` of PerViT (arXiv:2206.06801, Eq. 6-8) without the ``N x N x
D_r`` tensor.

Coordinates as Appendix E (the longer side spans ``[-1, 1]``); keys padded by ``P = 2 * (K // 2)``
cells of extrapolated coordinates, both ``K x K`` projections valid convolutions, as the official
code. The weighted distances depend on ``k - q`` only, so the first projection runs once on the map
of relative offsets and each query's window is a crop of it; on large maps the windows exist one
chunk of queries at a time, recomputed in the backward. The literal form:
``reference.position_logits_reference``."""
from typing import NamedTuple, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ..utils.amp import no_autocast, upcast
from ..utils.recompute import checkpointed_chunks, step_budget

# numbers in the key windows of one chunk of query rows on CPU (elsewhere step_budget); smaller maps
# run in one piece under autograd
CHUNK_ELEMENTS = 2 ** 20


class PositionParams(NamedTuple):
    """Parameters of ``Phi_p``: the distance weighting (Eq. 6's ``w_r``), the two ``K x K``
    peripheral projections and their instance norms (Eq. 8)."""
    distance_weight: Tensor
    distance_bias: Tensor
    conv1_weight: Tensor
    conv1_bias: Tensor
    norm1_weight: Tensor
    norm1_bias: Tensor
    conv2_weight: Tensor
    conv2_bias: Tensor
    norm2_weight: Tensor
    norm2_bias: Tensor

    # by name, not sliced: torch 2.6's dynamo fails on a slice of a NamedTuple
    def first_projection_params(self) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        """The first projection's parameters: ``R``'s weight and bias, the first convolution's."""
        return self.distance_weight, self.distance_bias, self.conv1_weight, self.conv1_bias

    def window_params(self) -> Tuple[Tensor, ...]:
        """The per-window parameters: the first norm, the second projection and its norm."""
        return (self.norm1_weight, self.norm1_bias, self.conv2_weight, self.conv2_bias,
                self.norm2_weight, self.norm2_bias)


def peripheral_padding(kernel_size: int) -> int:
    """Cells of extra keys per side that two valid ``K x K`` convolutions consume."""
    return 2 * (kernel_size // 2)


def grid_step(height: int, width: int) -> float:
    """Distance between neighbouring tokens when the longer side spans ``[-1, 1]``."""
    return 2.0 / max(max(height, width) - 1, 1)


def _axis(size: int, pad: int, step: float, like: Tensor) -> Tensor:
    index = torch.arange(-pad, size + pad, device=like.device, dtype=like.dtype)
    return (index - (size - 1) / 2) * step


def key_distances(height: int, width: int, pad: int, like: Tensor) -> Tensor:
    """``(H * W, H + 2 pad, W + 2 pad)``: each query's distance to each key of the padded grid."""
    step = grid_step(height, width)
    ys, xs = _axis(height, pad, step, like), _axis(width, pad, step, like)
    query_y, query_x = ys[pad:pad + height], xs[pad:pad + width]
    dy = ys.view(1, 1, -1, 1) - query_y.view(-1, 1, 1, 1)
    dx = xs.view(1, 1, 1, -1) - query_x.view(1, -1, 1, 1)
    return torch.sqrt(dy ** 2 + dx ** 2).flatten(0, 1)


def relative_distances(height: int, width: int, pad: int, like: Tensor) -> Tensor:
    """``(2H - 1 + 2 pad, 2W - 1 + 2 pad)``: the length of every offset ``k - q`` a key can have."""
    step = grid_step(height, width)
    dy = torch.arange(-(height - 1) - pad, height + pad, device=like.device,
                      dtype=like.dtype) * step
    dx = torch.arange(-(width - 1) - pad, width + pad, device=like.device, dtype=like.dtype) * step
    return torch.sqrt(dy.view(-1, 1) ** 2 + dx.view(1, -1) ** 2)


def query_windows(relative: Tensor, hw_shape: Sequence[int], rows: slice) -> Tensor:
    """Crop each query's key window out of a ``(C, 2H - 1 + 2p, 2W - 1 + 2p)`` translation-invariant
    map, ``(n * W, C, H + 2p, W + 2p)`` for ``n`` query ``rows``; the strided windows come in
    reversed order and are flipped back (the one copy)."""
    height, width = hw_shape
    channels, map_rows, map_cols = relative.shape
    window_rows, window_cols = map_rows - height + 1, map_cols - width + 1
    # the band of map rows these windows cover, cut before unfolding: the gradient of a slice of the
    # unfolded view would be a zero tensor of all N windows' size for every chunk
    band = relative[:, height - rows.stop:height - rows.start + window_rows - 1]
    windows = band.unfold(1, window_rows, 1).unfold(2, window_cols, 1)
    return windows.permute(1, 2, 0, 3, 4).flip(0, 1).reshape(-1, channels, window_rows, window_cols)


def instance_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float) -> Tensor:
    """Instance norm over the spatial dims of ``(B, C, H, W)``, as the official GroupNorm; a single
    value normalises to 0, where ``F.group_norm`` refuses."""
    if x.shape[-1] * x.shape[-2] == 1:
        return torch.zeros_like(x) + bias.view(1, -1, 1, 1)
    return F.group_norm(x, x.shape[1], weight, bias, eps)


def first_projection(params: PositionParams, hw_shape: Sequence[int]) -> Tensor:
    """The first peripheral projection on the map of relative offsets, ``(D_hid, 2H - 1 + P, 2W - 1
    + P)``.

    Float32 with exact products whatever autocast and TF32 say: each window's first norm divides by
    the window's spread and amplifies this smooth map's rounding (with TF32 the gradients at a 7x9
    map moved by 4e-2 of their scale). So the convolution is a matmul of its unfolded taps; the map
    is small."""
    height, width = hw_shape
    # a 0-d tensor under tracing, which unfold refuses
    kernel_size = int(params.conv1_weight.shape[-1])
    with no_autocast(params.conv1_weight.device.type):
        distance_weight, distance_bias, weight, bias = upcast(*params.first_projection_params())
        distances = relative_distances(height, width, peripheral_padding(kernel_size), weight)
        weighted = distances * distance_weight.view(-1, 1, 1) + distance_bias.view(-1, 1, 1)
        taps = F.unfold(weighted.unsqueeze(0), kernel_size)[0]
        projected = torch.addmm(bias.unsqueeze(1), weight.flatten(1), taps)
    rows, cols = (side - kernel_size + 1 for side in weighted.shape[1:])
    return projected.view(-1, rows, cols)


def position_logits(params: PositionParams, hw_shape: Sequence[int], eps: float = 1e-5) -> Tensor:
    """Pre-sigmoid ``Phi_p`` logits ``(heads, HW, HW)`` (Eq. 8): the first projection on the offset
    map, the rest by chunks of query rows (:func:`_row_logits`), in one piece under autograd while
    the windows fit :data:`CHUNK_ELEMENTS`, else recomputed in the backward."""
    height, width = hw_shape
    relative = first_projection(params, hw_shape)
    row_elements = width * relative.shape[0] * (relative.shape[1] - height
                                                + 1) * (relative.shape[2] - width + 1)
    rows_per_chunk = max(1, step_budget(CHUNK_ELEMENTS, relative.device) // row_elements)
    if rows_per_chunk >= height:
        return _row_logits(slice(0, height), relative, params, hw_shape, eps)
    used = [relative, params.norm1_weight, params.norm1_bias, params.conv2_weight,
            params.conv2_bias, params.norm2_weight, params.norm2_bias]
    return checkpointed_chunks(_chunk_logits, height * width, rows_per_chunk * width, (), relative,
                               params, hw_shape, eps, params=[t for t in used if t.requires_grad])


def _chunk_logits(queries: slice, relative: Tensor, params: PositionParams, hw_shape: Sequence[int],
                  eps: float) -> Tensor:
    """:func:`_row_logits` of the ``queries`` (a span of token indices) of whole rows."""
    width = hw_shape[1]
    return _row_logits(slice(queries.start // width, queries.stop // width), relative, params,
                       hw_shape, eps)


def _row_logits(rows: slice, relative: Tensor, params: PositionParams, hw_shape: Sequence[int],
                eps: float) -> Tensor:
    """``(heads, n W, HW)`` logits of ``n`` query ``rows``: each window cropped and normalised, the
    second projection (under autocast) and its norm, in float32 otherwise."""
    norm1_weight, norm1_bias, conv2_weight, conv2_bias, norm2_weight, norm2_bias = upcast(
        *params.window_params()
    )
    hidden = query_windows(relative, hw_shape, rows)
    hidden = F.relu(instance_norm(hidden, norm1_weight, norm1_bias, eps))
    # the second projection channels-last (few channels over many windows: faster on CPU); the norms
    # stay channels-first
    logits = F.conv2d(hidden.contiguous(memory_format=torch.channels_last), conv2_weight,
                      conv2_bias).contiguous()
    logits = instance_norm(logits, norm2_weight, norm2_bias, eps)
    return logits.flatten(2).transpose(0, 1)
