"""Position-based attention ``Phi_p`` of PerViT (arXiv:2206.06801, Eq. 6-8) without the
``N x N x D_r`` tensor.

Coordinates are normalised as in the paper (Appendix E): the longer side spans ``[-1, 1]`` and the
shorter one uses the same step. Keys are padded by ``P = 2 * (K // 2)`` cells of extrapolated
coordinates, and the two ``K x K`` projections are valid convolutions, as in the official code. The
weighted distances depend on ``k - q`` only, so the first projection runs once on the
``(2H - 1 + 2P) x (2W - 1 + 2P)`` map of relative offsets and each query's key window is a crop of
it; only the instance norms depend on the query. The windows and the second projection exist for one
chunk of queries at a time on large maps, recomputed in the backward. The literal form is
``reference.position_logits_reference``."""
from typing import NamedTuple, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ..utils.amp import no_autocast, upcast
from ..utils.recompute import checkpointed_chunks, step_budget

# Numbers in the key windows of one chunk of query rows (``D_hid (H + 2P) (W + 2P)`` per query) on
# CPU (on a GPU, :func:`~mmvisattn.ops.utils.recompute.step_budget`). Maps below it run under
# autograd in one piece; larger ones chunk by chunk, recomputed in the backward.
CHUNK_ELEMENTS = 2 ** 20


class PositionParams(NamedTuple):
    """Parameters of ``Phi_p``: ``R = distance_weight * d + distance_bias`` (``D_r`` channels,
    Eq. 6's ``w_r``), the two peripheral projections (``K x K`` convolutions) and their instance
    norms (Eq. 8)."""
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
        """The parameters of the first projection: ``R``'s weight and bias, the first
        convolution's."""
        return self.distance_weight, self.distance_bias, self.conv1_weight, self.conv1_bias

    def window_params(self) -> Tuple[Tensor, ...]:
        """The parameters applied per query window: the first norm, the second projection and its
        norm."""
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
    """``(H * W, H + 2 pad, W + 2 pad)``: distance from each query to each key of the padded
    grid."""
    step = grid_step(height, width)
    ys, xs = _axis(height, pad, step, like), _axis(width, pad, step, like)
    query_y, query_x = ys[pad:pad + height], xs[pad:pad + width]
    dy = ys.view(1, 1, -1, 1) - query_y.view(-1, 1, 1, 1)
    dx = xs.view(1, 1, 1, -1) - query_x.view(1, -1, 1, 1)
    return torch.sqrt(dy ** 2 + dx ** 2).flatten(0, 1)


def relative_distances(height: int, width: int, pad: int, like: Tensor) -> Tensor:
    """``(2H - 1 + 2 pad, 2W - 1 + 2 pad)``: length of every offset ``k - q`` a padded key can
    have."""
    step = grid_step(height, width)
    dy = torch.arange(-(height - 1) - pad, height + pad, device=like.device,
                      dtype=like.dtype) * step
    dx = torch.arange(-(width - 1) - pad, width + pad, device=like.device, dtype=like.dtype) * step
    return torch.sqrt(dy.view(-1, 1) ** 2 + dx.view(1, -1) ** 2)


def query_windows(relative: Tensor, hw_shape: Sequence[int], rows: slice) -> Tensor:
    """Crop the key window of each query of the query ``rows`` out of a
    ``(C, 2H - 1 + 2p, 2W - 1 + 2p)`` map of a translation-invariant quantity:
    ``(n * W, C, H + 2p, W + 2p)`` for ``n`` rows.

    The window of query ``(i, j)`` starts at offset ``(H - 1 - i, W - 1 - j)``, so the strided
    windows come in reversed query order and are flipped back (the one copy)."""
    height, width = hw_shape
    channels, map_rows, map_cols = relative.shape
    window_rows, window_cols = map_rows - height + 1, map_cols - width + 1
    # the band of map rows these windows cover, cut before unfolding: the gradient of a slice of the
    # unfolded view would be a zero tensor of all N windows' size for every chunk
    band = relative[:, height - rows.stop:height - rows.start + window_rows - 1]
    windows = band.unfold(1, window_rows, 1).unfold(2, window_cols, 1)
    return windows.permute(1, 2, 0, 3, 4).flip(0, 1).reshape(-1, channels, window_rows, window_cols)


def instance_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float) -> Tensor:
    """Per-sample, per-channel normalisation over the spatial dims of ``(B, C, H, W)`` (GroupNorm
    with one group per channel, as the official code); a single value normalises to 0 (a 1 x 1
    token grid), where ``F.group_norm`` refuses."""
    if x.shape[-1] * x.shape[-2] == 1:
        return torch.zeros_like(x) + bias.view(1, -1, 1, 1)
    return F.group_norm(x, x.shape[1], weight, bias, eps)


def first_projection(params: PositionParams, hw_shape: Sequence[int]) -> Tensor:
    """The first peripheral projection on the map of relative offsets:
    ``(D_hid, 2H - 1 + P, 2W - 1 + P)``, each query's window a crop of it (:func:`query_windows`).

    Float32 (float64 stays) with exact products whatever autocast and TF32 say: each window's first
    norm subtracts the window's mean of this smooth map and divides by its spread, amplifying the
    map's rounding. With TF32 products here (cuDNN's default for float32 convolutions), the
    gradients at a 7x9 map moved by 4e-2 of their scale, emulated; exact, by 3e-3 with TF32 in the
    second projection. So the convolution is a matrix product of its unfolded taps (float32
    ``matmul`` is exact unless a user turns TF32 on for it); the map is small (``D_r K^2`` taps of
    ``(2H + P) (2W + P)`` cells)."""
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
    """Pre-sigmoid ``Phi_p`` logits ``(heads, HW, HW)`` (Eq. 8 before the sigmoid); the first
    peripheral projection runs on the map of relative offsets, the rest by chunks of query rows
    (:func:`_row_logits`): in one piece under autograd while the queries' windows hold at most
    :data:`CHUNK_ELEMENTS` numbers, else chunk by chunk, each recomputed in the backward."""
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
    """:func:`_row_logits` of the ``queries`` (a span of token indices) of whole consecutive
    rows."""
    width = hw_shape[1]
    return _row_logits(slice(queries.start // width, queries.stop // width), relative, params,
                       hw_shape, eps)


def _row_logits(rows: slice, relative: Tensor, params: PositionParams, hw_shape: Sequence[int],
                eps: float) -> Tensor:
    """``(heads, n W, HW)`` logits of the queries of ``n`` query ``rows`` from the
    ``(D_hid, 2H - 1 + P, 2W - 1 + P)`` first projection: each query's window cropped, normalised,
    the second projection and its norm; in float32 (half parameters upcast) but for the second
    projection under autocast."""
    norm1_weight, norm1_bias, conv2_weight, conv2_bias, norm2_weight, norm2_bias = upcast(
        *params.window_params()
    )
    hidden = query_windows(relative, hw_shape, rows)
    hidden = F.relu(instance_norm(hidden, norm1_weight, norm1_bias, eps))
    # the second projection in channels-last memory: few channels over many windows, where CPU
    # convolutions run faster forward and backward; the instance norms stay channels-first, where
    # theirs are fast
    logits = F.conv2d(hidden.contiguous(memory_format=torch.channels_last), conv2_weight,
                      conv2_bias).contiguous()
    logits = instance_norm(logits, norm2_weight, norm2_bias, eps)
    return logits.flatten(2).transpose(0, 1)
