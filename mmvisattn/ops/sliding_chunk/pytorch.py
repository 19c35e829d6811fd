"""Sliding-chunk local attention in torch with a hand-written backward (App. C of arXiv:2103.15358).

Every query chunk multiplies its ``w^2`` queries with the ``S`` keys its slots gather (see
:mod:`.layout`), so the scores are ``(B*H, C, w^2, S)``: ``N * S`` numbers with ``S <= G + 9 w^2``.
The forward keeps only the inputs, the output and the slot tables; the probabilities and the keys
and values gathered per chunk (nine copies of the map under autograd) are rebuilt slice by slice in
the backward and never stored, so the saved tensors grow with ``N * d`` as SDPA's do, and the
transient ones are bounded by :data:`SCORE_BUDGET`.

Mixed precision (:mod:`mmvisattn.ops.amp`): autocast is off inside the Function and the arithmetic
is float32 whatever the inputs' dtype (half logits of large inputs overflow before the softmax);
the output comes back in ``v``'s dtype, each gradient in its input's.
"""
from typing import List, NamedTuple, Optional, Sequence, Tuple

import torch
from torch import Tensor

from ..amp import autocast_off, upcast
from ..recompute import runs

SCORE_BUDGET = 1 << 18  # score entries of one slice (rows of B*H by chunks): bounds the transient memory


class ChunkGrid:
    """Gathers the slot keys of chunks from a ``(b, C + 1, w^2, d)`` table of key chunks (the last one
    zero) whole chunks at a time (one index per neighbour chunk, the zero chunk for those beyond the
    border unless the grid wraps around), and adds slot gradients back the same way: a few large
    copies instead of one per token."""

    def __init__(self, rows: int, cols: int, offsets: Sequence[Tuple[int, int]], cyclic: bool,
                 device: torch.device) -> None:
        self.neighbours = len(offsets)
        row, col = torch.arange(rows)[:, None, None], torch.arange(cols)[None, :, None]
        dx, dy = torch.tensor([o[0] for o in offsets]), torch.tensor([o[1] for o in offsets])
        target_row, target_col = row + dx, col + dy
        if cyclic:
            index = (target_row % rows) * cols + target_col % cols
        else:
            outside = (target_row < 0) | (target_row >= rows) | (target_col < 0) | (target_col >= cols)
            index = torch.where(outside, rows * cols, target_row * cols + target_col)
        self.index = index.reshape(-1).to(device)  # (C * len(offsets),) chunk ids, rows*cols = zero chunk

    def _index(self, chunks: slice) -> Tensor:
        return self.index[chunks.start * self.neighbours:chunks.stop * self.neighbours]

    def gather(self, table: Tensor, glob: Tensor, chunks: slice) -> Tensor:
        """``(b, C + 1, L, d)`` chunks and ``(b, G, d)`` globals -> ``(b, c, G + len(offsets) L, d)``
        for the ``c`` query chunks ``chunks``."""
        batch, _, size, dims = table.shape
        count = chunks.stop - chunks.start
        local = table.flatten(2).index_select(1, self._index(chunks)).view(batch, count, -1, dims)
        if glob.shape[1] == 0:
            return local
        return torch.cat([glob[:, None].expand(-1, count, -1, -1), local], dim=2)

    def scatter_add_(self, table: Tensor, local: Tensor, chunks: slice) -> None:
        """Adjoint of :meth:`gather` on the local slots: add ``(b, c, len(offsets) L, d)`` into the
        ``(b, C + 1, L, d)`` table."""
        table.flatten(2).index_add_(1, self._index(chunks), local.reshape(local.shape[0], -1, table[0, 0].numel()))


class Slice(NamedTuple):
    rows: slice  # of the B*H axis
    chunks: slice


def _slices(batch_heads: int, chunks: int, queries: int, slots: int) -> List[Slice]:
    """Whole rows of ``B*H`` per slice while they fit :data:`SCORE_BUDGET`, else runs of chunks of one row."""
    per_chunk = queries * slots
    if chunks * per_chunk <= SCORE_BUDGET:
        return [Slice(rows, slice(0, chunks)) for rows in runs(batch_heads, SCORE_BUDGET // (chunks * per_chunk))]
    return [Slice(slice(row, row + 1), part) for row in range(batch_heads)
            for part in runs(chunks, max(1, SCORE_BUDGET // per_chunk))]


def _bias_rows(bias: Optional[Tensor], rows: slice) -> Optional[Tensor]:
    """The ``(b, 1, w^2, S)`` bias of ``rows`` of the ``B*H`` axis (heads cycle fastest)."""
    if bias is None:
        return None
    return bias[torch.arange(rows.start, rows.stop, device=bias.device) % bias.shape[0]][:, None]


def _scores(q: Tensor, k: Tensor, k_glob: Tensor, grid: ChunkGrid, invalid: Tensor, bias: Optional[Tensor],
            part: Slice) -> Tensor:
    """The chunks' ``q k_slots^T + bias`` of one slice, ``-inf`` on the invalid slots; the gathered
    keys live only inside this call."""
    scores = q[part.rows, part.chunks] @ grid.gather(k[part.rows], k_glob[part.rows], part.chunks).transpose(-1, -2)
    bias = _bias_rows(bias, part.rows)
    if bias is not None:
        scores += bias
    # -inf added, not masked_fill_: filling through a mask broadcast over the heads is some 6x slower
    # on CPU than filling the small mask itself and adding it
    blocked = invalid[part.chunks]
    return scores.add_(torch.zeros(blocked.shape, dtype=scores.dtype, device=scores.device)
                       .masked_fill_(blocked, float('-inf')))


class SlidingChunkAttention(torch.autograd.Function):
    """``softmax(q k_slots^T + bias, masked) v_slots`` per chunk.

    Inputs: ``q`` ``(B*H, C, w^2, d)`` scaled queries; ``k``, ``v`` ``(B*H, C + 1, w^2, d)`` key and
    value chunks, the last one zero; ``k_glob``, ``v_glob`` ``(B*H, G, d)``; ``grid`` the
    :class:`ChunkGrid`; ``invalid`` ``(C, 1 or w^2, S)`` masked slots; ``bias`` ``(H, w^2, S)`` or
    ``None``. Output ``(B*H, C, w^2, d)``.

    The forward saves the inputs and the output, not the ``N x S`` probabilities: the backward
    recomputes them slice by slice (one more ``q k^T`` product and softmax; a slice holds whole rows
    of slots, so no log-sum-exp needs keeping, unlike FlashAttention's blocks), so the saved memory
    is ``O(N d)`` like SDPA's. Both passes run in slices of heads and chunks (:data:`SCORE_BUDGET`),
    so the scores exist for one slice at a time.
    """

    @staticmethod
    @autocast_off
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, k_glob: Tensor, v_glob: Tensor, grid: ChunkGrid,
                invalid: Tensor, bias: Optional[Tensor]) -> Tensor:
        inputs = (q, k, v, k_glob, v_glob)
        q, k, v, k_glob, v_glob = upcast(*inputs)
        ctx.bias_dtype = None if bias is None else bias.dtype
        bias = None if bias is None else upcast(bias)[0]
        out = q.new_empty(*q.shape[:-1], v.shape[-1])
        for part in _slices(*q.shape[:3], invalid.shape[-1]):
            probs = _scores(q, k, k_glob, grid, invalid, bias, part).softmax(dim=-1)
            out[part.rows, part.chunks] = probs @ grid.gather(v[part.rows], v_glob[part.rows], part.chunks)
        ctx.save_for_backward(*inputs, bias, out)
        ctx.grid, ctx.invalid = grid, invalid
        return out.to(inputs[2].dtype)

    @staticmethod
    @autocast_off
    def backward(ctx, grad_out: Tensor) -> Tuple[Optional[Tensor], ...]:
        *inputs, bias, out = ctx.saved_tensors
        q, k, v, k_glob, v_glob, grad_out = upcast(*inputs, grad_out)
        grid, invalid, num_global = ctx.grid, ctx.invalid, k_glob.shape[1]
        queries, slots = q.shape[2], invalid.shape[-1]
        grad_q, grad_k, grad_v = torch.empty_like(q), torch.zeros_like(k), torch.zeros_like(v)
        grad_k_glob, grad_v_glob = torch.zeros_like(k_glob), torch.zeros_like(v_glob)
        heads = 1 if bias is None else bias.shape[0]
        grad_bias = q.new_zeros(q.shape[0], queries, slots) if bias is not None else None
        grad_out = grad_out.contiguous()
        # sum_j p_ij dp_ij = grad_out_i . out_i: the softmax backward without a score-sized product
        row_dots = (grad_out * out).sum(dim=-1, keepdim=True)
        for part in _slices(*q.shape[:3], slots):
            rows, chunks = part
            p = _scores(q, k, k_glob, grid, invalid, bias, part).softmax(dim=-1)
            g, q_part = grad_out[rows, chunks], q[rows, chunks]
            grad_pv = p.transpose(-1, -2) @ g
            grid.scatter_add_(grad_v[rows], grad_pv[:, :, num_global:], chunks)
            grad_v_glob[rows] += grad_pv[:, :, :num_global].sum(dim=1)
            grad_s = g @ grid.gather(v[rows], v_glob[rows], chunks).transpose(-1, -2)
            grad_s -= row_dots[rows, chunks]
            grad_s *= p
            del p, grad_pv
            if grad_bias is not None:
                grad_bias[rows] += grad_s.sum(dim=1)
            grad_q[rows, chunks] = grad_s @ grid.gather(k[rows], k_glob[rows], chunks)
            grad_kq = grad_s.transpose(-1, -2) @ q_part
            grid.scatter_add_(grad_k[rows], grad_kq[:, :, num_global:], chunks)
            grad_k_glob[rows] += grad_kq[:, :, :num_global].sum(dim=1)
        if grad_bias is not None:
            grad_bias = grad_bias.view(-1, heads, queries, slots).sum(dim=0).to(ctx.bias_dtype)
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
        everything = Slice(slice(0, q.shape[0]), slice(0, q.shape[1]))
        scores = _scores(q, k, k_glob, grid, invalid, None if bias is None else upcast(bias)[0], everything)
        return (scores.softmax(dim=-1) @ grid.gather(v, v_glob, everything.chunks)).to(dtype)
    return SlidingChunkAttention.apply(q, k, v, k_glob, v_glob, grid, invalid, bias)
