"""Masked softmax attention by blocks of queries with the backward written out (``impl='torch'``):
only the inputs saved, each block's weights recomputed; logits, softmax and mask in float32."""
from typing import Optional

import torch
from torch import Tensor

from ..utils.amp import HALF_DTYPES, autocast_off
from ..utils.recompute import runs
from ..utils.tracing import apply_function

# Weights of one block of queries over every batch, head and key (128 MB in float32): a block as
# large as fits, so that a Castling-ViT-B layer at 32x32 tokens and batch 2 takes one
BLOCK_WEIGHTS = 2 ** 25


def product(a: Tensor, b: Tensor) -> Tensor:
    """``a @ b`` with the same leading dims in float32: half operands as they are on CUDA (cuBLAS
    accumulates in float32), upcast first elsewhere; float32 and float64 as they are."""
    lead = a.shape[:-2]
    a, b = a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:])
    if a.dtype not in HALF_DTYPES:
        out = torch.bmm(a, b)
    elif a.device.type == 'cuda':
        out = torch.bmm(a, b, out_dtype=torch.float32)
    else:
        out = torch.bmm(a.float(), b.float())
    return out.view(*lead, *out.shape[-2:])


def query_block(q: Tensor, k: Tensor) -> int:
    """Queries per block: :data:`BLOCK_WEIGHTS` weights over all batches and heads, at least one."""
    return max(1, BLOCK_WEIGHTS // (q.shape[:-2].numel() * k.shape[-2]))


def _join(parts, dim: int) -> Tensor:
    return torch.cat(parts, dim=dim) if len(parts) > 1 else parts[0]


def _weights(q: Tensor, k: Tensor, scale: float) -> Tensor:
    """A block's softmax weights in float32, the same arithmetic (so mask) in both passes."""
    logits = product(q, k.transpose(-1, -2)).mul_(scale)
    return logits.sub_(torch.logsumexp(logits, dim=-1, keepdim=True)).exp_()


class MaskedSoftmax(torch.autograd.Function):
    """``(P * [P > t]) V`` by blocks of queries, each block's weights recomputed in the backward;
    only the inputs are saved (views of the caller's projection). The mask is piecewise constant:
    its gradient is the kept weights'. Autocast off in both passes."""

    @staticmethod
    @autocast_off
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, scale: float, threshold: float,
                block: int) -> Tensor:
        outs = []
        for rows in runs(q.shape[-2], block):
            weights = _weights(q[..., rows, :], k, scale)
            outs.append(product(weights.mul_(weights > threshold).to(v.dtype), v))
        ctx.save_for_backward(q, k, v)
        ctx.scale, ctx.threshold, ctx.block = scale, threshold, block
        return _join(outs, -2).to(v.dtype)

    @staticmethod
    @autocast_off
    def backward(ctx, grad_out: Tensor):
        q, k, v = ctx.saved_tensors
        grad_out = grad_out.to(v.dtype)
        grad_q, grad_k, grad_v = [], 0, 0
        for rows in runs(q.shape[-2], ctx.block):
            queries = q[..., rows, :]
            weights = _weights(queries, k, ctx.scale)
            kept = weights > ctx.threshold
            grad_v = grad_v + product(weights.mul(kept).to(v.dtype).transpose(-1, -2),
                                      grad_out[..., rows, :])
            grad_weights = product(grad_out[..., rows, :], v.transpose(-1, -2)).mul_(kept)
            # through the softmax, P (dP - sum_j P dP), and the scale of the logits
            grad_logits = weights.mul_(grad_weights
                                       - (grad_weights * weights).sum(dim=-1, keepdim=True))
            grad_logits = grad_logits.mul_(ctx.scale).to(q.dtype)
            grad_q.append(product(grad_logits, k))
            grad_k = grad_k + product(grad_logits.transpose(-1, -2), queries)
        return _join(grad_q,
                     -2).to(q.dtype), grad_k.to(k.dtype), grad_v.to(v.dtype), None, None, None


def masked_softmax_attention_torch(q: Tensor, k: Tensor, v: Tensor, threshold: float,
                                   scale: Optional[float] = None,
                                   dropout: float = 0.0, block: Optional[int] = None) -> Tensor:
    """:class:`MaskedSoftmax` with the logits' ``scale`` and ``block`` queries a block
    (:func:`query_block` by default); ``dropout`` must be 0."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    block = query_block(q, k) if block is None else block
    return apply_function(MaskedSoftmax, q, k, v, scale, threshold, block)


