"""Peripheral attention through ``F.scaled_dot_product_attention``.

``Normalize[exp(tau q k^T) * Phi_p] = softmax(tau q k^T + log Phi_p)`` (the row maximum and the
normalisation cancel), so Eq. 5 is softmax attention with ``log Phi_p`` as an additive bias, one
``(heads, N, N)`` map shared by the batch. SDPA then runs its fused kernels instead of forming,
exponentiating and L1-normalising the scores in separate passes.
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
    """The weights SDPA applies above, written out: ``(B, heads, N, M)`` from ``(B, heads, N, d)``
    queries, ``(B, heads, M, d)`` keys and ``(heads, N, M)`` log position attention (for attention
    maps)."""
    return torch.softmax(scale * q @ k.transpose(-2, -1) + log_phi_p, dim=-1)
