"""Sliding-chunk local attention in torch with a hand-written backward (App. C of arXiv:2103.15358).

Every query chunk multiplies its ``w^2`` queries with the ``S`` keys its slots gather (see
:mod:`.layout`), so the scores are ``(B*H, C, w^2, S)``: ``N * S`` numbers with ``S <= G + 9 w^2``.
The forward keeps only the softmax probabilities, the inputs and the slot tables; the keys and
values gathered per chunk (nine copies of the map under autograd) are rebuilt slice by slice of
heads in both passes and never stored, so the saved tensors grow with ``N * w^2``, not ``N^2``.

Mixed precision (:mod:`mmvisattn.ops.amp`): autocast is off inside the Function and the arithmetic
is float32 whatever the inputs' dtype (half logits of large inputs overflow before the softmax);
the output comes back in ``v``'s dtype, each gradient in its input's.
"""
from typing import Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ..amp import autocast_off, upcast

GATHER_BUDGET = 1 << 21  # elements of one slice's gathered keys: bounds the transient memory


class ChunkGrid:
    """Gathers the slot keys of every chunk from a ``(b, rows, cols, w^2, d)`` grid of key chunks
    whole chunks at a time (one index per neighbour chunk, a zero chunk for those beyond the border
    unless the grid wraps around), and scatters slot gradients back the same way: a few large copies
    instead of one per token."""

    def __init__(self, rows: int, cols: int, offsets: Sequence[Tuple[int, int]], cyclic: bool,
                 device: torch.device) -> None:
        self.rows, self.cols, self.cyclic = rows, cols, cyclic
        row, col = torch.arange(rows)[:, None, None], torch.arange(cols)[None, :, None]
        dx, dy = torch.tensor([o[0] for o in offsets]), torch.tensor([o[1] for o in offsets])
        target_row, target_col = row + dx, col + dy
        if cyclic:
            index = (target_row % rows) * cols + target_col % cols
        else:
            outside = (target_row < 0) | (target_row >= rows) | (target_col < 0) | (target_col >= cols)
            index = torch.where(outside, rows * cols, target_row * cols + target_col)
        self.index = index.reshape(-1).to(device)  # (C * len(offsets),) chunk ids, rows*cols = zero chunk

    def gather(self, grid: Tensor, glob: Tensor) -> Tensor:
        """``(b, rows, cols, L, d)`` chunks and ``(b, G, d)`` globals -> ``(b, C, G + len(offsets) L, d)``."""
        batch, rows, cols, size, dims = grid.shape
        flat = grid.reshape(batch, rows * cols, size * dims)
        if not self.cyclic:
            flat = F.pad(flat, (0, 0, 0, 1))
        local = flat.index_select(1, self.index).view(batch, rows * cols, -1, dims)
        if glob.shape[1] == 0:
            return local
        return torch.cat([glob[:, None].expand(-1, rows * cols, -1, -1), local], dim=2)

    def scatter(self, local: Tensor) -> Tensor:
        """Adjoint of :meth:`gather` on the local slots: ``(b, C, len(offsets) L, d)`` -> chunk grid."""
        batch, chunks, _, dims = local.shape
        local = local.reshape(batch, self.index.numel(), -1)
        grid = local.new_zeros(batch, chunks + 1, local.shape[-1]).index_add_(1, self.index, local)
        return grid[:, :chunks].view(batch, self.rows, self.cols, -1, dims)


def _slices(batch_heads: int, chunks: int, slots: int, dims: int):
    step = max(1, GATHER_BUDGET // max(1, chunks * slots * dims))
    return [(start, min(start + step, batch_heads)) for start in range(0, batch_heads, step)]


def _heads(start: int, stop: int, heads: int, device: torch.device) -> Tensor:
    return torch.arange(start, stop, device=device) % heads


def _bias_rows(bias: Optional[Tensor], start: int, stop: int, heads: int) -> Optional[Tensor]:
    """The ``(b, 1, w^2, S)`` bias of rows ``start:stop`` of the ``B*H`` axis (heads cycle fastest)."""
    return None if bias is None else bias[_heads(start, stop, heads, bias.device)][:, None]


def _probabilities(q: Tensor, k: Tensor, k_glob: Tensor, grid: ChunkGrid, invalid: Tensor, bias: Optional[Tensor],
                   out: Optional[Tensor] = None) -> Tensor:
    """Softmax over each chunk's slots of ``q k_slots^T + bias``, ``-inf`` on the invalid slots; the
    gathered keys live only inside this call."""
    scores = torch.matmul(q, grid.gather(k, k_glob).transpose(-1, -2), out=out)
    if bias is not None:
        scores += bias
    scores.masked_fill_(invalid, float('-inf'))
    return scores.softmax(dim=-1)


class SlidingChunkAttention(torch.autograd.Function):
    """``softmax(q k_slots^T + bias, masked) v_slots`` per chunk.

    Inputs: ``q`` ``(B*H, C, w^2, d)`` scaled queries; ``k``, ``v`` ``(B*H, rows, cols, w^2, d)``
    key and value chunks; ``k_glob``, ``v_glob`` ``(B*H, G, d)``; ``grid`` the :class:`ChunkGrid`;
    ``invalid`` ``(C, 1 or w^2, S)`` masked slots; ``bias`` ``(H, w^2, S)`` or ``None``.
    Output ``(B*H, C, w^2, d)``.
    """

    @staticmethod
    @autocast_off
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, k_glob: Tensor, v_glob: Tensor, grid: ChunkGrid,
                invalid: Tensor, bias: Optional[Tensor]) -> Tensor:
        inputs = (q, k, v, k_glob, v_glob)
        q, k, v, k_glob, v_glob = upcast(*inputs)
        ctx.bias_dtype = None if bias is None else bias.dtype
        bias = None if bias is None else upcast(bias)[0]
        batch_heads, chunks, queries, dims = q.shape
        slots = invalid.shape[-1]
        heads = 1 if bias is None else bias.shape[0]
        probs = q.new_empty(batch_heads, chunks, queries, slots)
        out = q.new_empty(*q.shape[:-1], v.shape[-1])
        for start, stop in _slices(batch_heads, chunks, slots, dims):
            probs[start:stop] = _probabilities(q[start:stop], k[start:stop], k_glob[start:stop], grid, invalid,
                                               _bias_rows(bias, start, stop, heads), out=probs[start:stop])
            torch.matmul(probs[start:stop], grid.gather(v[start:stop], v_glob[start:stop]), out=out[start:stop])
        ctx.save_for_backward(*inputs, probs, out)
        ctx.grid, ctx.heads = grid, heads
        return out.to(inputs[2].dtype)

    @staticmethod
    @autocast_off
    def backward(ctx, grad_out: Tensor) -> Tuple[Optional[Tensor], ...]:
        *inputs, probs, out = ctx.saved_tensors
        q, k, v, k_glob, v_glob, grad_out = upcast(*inputs, grad_out)
        grid, num_global = ctx.grid, k_glob.shape[1]
        batch_heads, chunks, queries, dims = q.shape
        slots = probs.shape[-1]
        grad_q, grad_k, grad_v = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        grad_k_glob, grad_v_glob = torch.empty_like(k_glob), torch.empty_like(v_glob)
        grad_bias = probs.new_empty(batch_heads, queries, slots) if ctx.bias_dtype is not None else None
        grad_out = grad_out.contiguous()
        # sum_j p_ij dp_ij = grad_out_i . out_i: the softmax backward without a score-sized product
        row_dots = (grad_out * out).sum(dim=-1, keepdim=True)
        for start, stop in _slices(batch_heads, chunks, slots, dims):
            p, g = probs[start:stop], grad_out[start:stop]
            grad_v[start:stop] = grid.scatter(p[..., num_global:].transpose(-1, -2) @ g)
            torch.sum(p[..., :num_global].transpose(-1, -2) @ g, dim=1, out=grad_v_glob[start:stop])
            grad_s = g @ grid.gather(v[start:stop], v_glob[start:stop]).transpose(-1, -2)
            grad_s -= row_dots[start:stop]
            grad_s *= p
            if grad_bias is not None:
                torch.sum(grad_s, dim=1, out=grad_bias[start:stop])
            torch.matmul(grad_s, grid.gather(k[start:stop], k_glob[start:stop]), out=grad_q[start:stop])
            grad_k[start:stop] = grid.scatter(grad_s[..., num_global:].transpose(-1, -2) @ q[start:stop])
            torch.sum(grad_s[..., :num_global].transpose(-1, -2) @ q[start:stop], dim=1, out=grad_k_glob[start:stop])
        if grad_bias is not None:
            grad_bias = grad_bias.view(-1, ctx.heads, queries, slots).sum(dim=0).to(ctx.bias_dtype)
        grads = (grad_q, grad_k, grad_v, grad_k_glob, grad_v_glob)
        return (*(grad.to(x.dtype) for grad, x in zip(grads, inputs)), None, None, grad_bias)


def sliding_chunk_local_torch(q: Tensor, k: Tensor, v: Tensor, k_glob: Tensor, v_glob: Tensor, grid: ChunkGrid,
                              invalid: Tensor, bias: Optional[Tensor]) -> Tensor:
    """The local attention of every chunk. Traced (``torch.onnx.export``, mmengine's FLOP
    counter), the same arithmetic runs as plain ops on the whole batch: not through
    :func:`mmvisattn.ops.tracing.apply_function`, because the Function's forward writes slice by
    slice into preallocated outputs (``out=``), which tracing records wrongly."""
    if torch.jit.is_tracing():
        dtype = v.dtype
        q, k, v, k_glob, v_glob = upcast(q, k, v, k_glob, v_glob)
        bias_rows = None if bias is None else _bias_rows(upcast(bias)[0], 0, q.shape[0], bias.shape[0])
        return (_probabilities(q, k, k_glob, grid, invalid, bias_rows) @ grid.gather(v, v_glob)).to(dtype)
    return SlidingChunkAttention.apply(q, k, v, k_glob, v_glob, grid, invalid, bias)
