"""Peripheral attention through ``F.scaled_dot_product_attention``: ``Normalize[exp(tau q k^T) *
Phi_p] = softmax(tau q k^T + log Phi_p)``, so Eq. 5 is softmax attention with one ``(heads, N, N)``
additive bias shared by the batch, on SDPA's fused kernels.
"""
import torch
import torch.nn.functional as F
from torch import Tensor


def peripheral_attention_sdpa(q: Tensor, k: Tensor, v: Tensor, log_phi_p: Tensor,
                              scale: float) -> Tensor:
    """``(B, heads, N, d)`` queries, keys and values, ``(heads, N, N)`` log position attention."""
    bias = log_phi_p.to(q.dtype).unsqueeze(0)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale)


def mixed_attention_weights(q: Tensor, k: Tensor, log_phi_p: Tensor, scale: float) -> Tensor:
    """The weights SDPA applies, written out ``(B, heads, N, M)`` (for attention maps)."""
    return torch.softmax(scale * q @ k.transpose(-2, -1) + log_phi_p, dim=-1)
