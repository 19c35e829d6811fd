"""References of the peripheral-attention ops: :func:`peripheral_attention_reference` writes Eq. 5
out (``exp(tau q k^T)`` times ``Phi_p`` over its row sums); :func:`position_logits_reference` runs
Eq. 7-8 literally on the ``HW x HW x D_r`` distance tensor, as the official code does.
"""
import torch
import torch.nn.functional as F
from torch import Tensor

from ..utils.amp import float32_math
from .position import PositionParams, instance_norm, key_distances, peripheral_padding


def mixed_attention_reference(q: Tensor, k: Tensor, log_phi_p: Tensor, scale: float) -> Tensor:
    """Row-normalised ``Phi_c * Phi_p`` ``(B, heads, N, N)`` of the queries and keys."""
    logits = scale * q @ k.transpose(-2, -1)
    content = torch.exp(logits - logits.amax(dim=-1, keepdim=True))
    mixed = content * torch.exp(log_phi_p)
    return mixed / mixed.sum(dim=-1, keepdim=True)


@float32_math  # in float32 whatever the dtype (float64 stays)
def peripheral_attention_reference(q: Tensor, k: Tensor, v: Tensor, log_phi_p: Tensor,
                                   scale: float) -> Tensor:
    """Eq. 5 with the ``N x N`` mixed attention materialised."""
    return mixed_attention_reference(q, k, log_phi_p, scale) @ v


def position_logits_reference(params: PositionParams, hw_shape, eps: float = 1e-5) -> Tensor:
    """Pre-sigmoid ``Phi_p`` logits ``(heads, HW, HW)`` from the full ``(HW, D_r, H + 2P, W + 2P)``
    tensor of weighted distances (``P`` = :func:`peripheral_padding`)."""
    height, width = hw_shape
    kernel_size = params.conv1_weight.shape[-1]
    distances = key_distances(height, width, peripheral_padding(kernel_size), params.conv1_weight)
    weighted = distances.unsqueeze(-1) * params.distance_weight.view(-1) + params.distance_bias
    hidden = F.conv2d(weighted.permute(0, 3, 1, 2), params.conv1_weight, params.conv1_bias)
    hidden = F.relu(instance_norm(hidden, params.norm1_weight, params.norm1_bias, eps))
    logits = F.conv2d(hidden, params.conv2_weight, params.conv2_bias)
    logits = instance_norm(logits, params.norm2_weight, params.norm2_bias, eps)
    return logits.flatten(2).transpose(0, 1)
