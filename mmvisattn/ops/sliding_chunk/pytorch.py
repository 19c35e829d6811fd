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
from typing import List, NamedTuple, Optional, Tuple

import torch
from torch import Tensor

from ..amp import autocast_off, upcast
from ..recompute import runs
from ..token_grid import add_rows_

# Score entries of one slice (rows of B*H by chunks): bounds the transient memory. Measured on a 28x28 map
# (w 7, 346k scores per row of B*H; module forward + backward paired with SDPA): 2^19, whole rows, runs 7%
# faster, 2^17 6% and 2^20 20% slower (larger slices leave the cache). 2^18 stays: a larger budget adds
# its transient to the 112x112 peak, already 1.48x SDPA's against a 1.5x bound.
SCORE_BUDGET = 1 << 18


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


def _gather(table: Tensor, index: Tensor, part: Slice) -> Tensor:
    """The ``(b, c, S, d)`` slot keys (or values) of the chunks of ``part`` from the ``(B*H, T, d)``
    token table: one ``index_select`` of token rows, the global tokens included, so no concatenation
    (a ``cat`` of the globals onto chunk-wise gathers cost more than the gathers themselves); its
    adjoint is :func:`~mmvisattn.ops.token_grid.add_rows_`."""
    rows = table[part.rows]
    slots = index[part.chunks]
    return rows.index_select(1, slots.reshape(-1)).view(rows.shape[0], *slots.shape, rows.shape[-1])


def _bias_rows(bias: Optional[Tensor], rows: slice) -> Optional[Tensor]:
    """The ``(b, 1, w^2, S)`` bias of ``rows`` of the ``B*H`` axis (heads cycle fastest)."""
    if bias is None:
        return None
    return bias[torch.arange(rows.start, rows.stop, device=bias.device) % bias.shape[0]][:, None]


def _scores(q: Tensor, k: Tensor, index: Tensor, invalid: Tensor, bias: Optional[Tensor], part: Slice) -> Tensor:
    """The chunks' ``q k_slots^T + bias`` of one slice, ``-inf`` on the invalid slots; the gathered
    keys live only inside this call."""
    scores = q[part.rows, part.chunks] @ _gather(k, index, part).transpose(-1, -2)
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

    Inputs, as :class:`mmvisattn.ops.sliding_chunk.triton.SlidingChunkTriton` takes them: ``q``
    ``(B*H, C, w^2, d)`` scaled query chunks; ``k``, ``v`` ``(B*H, T, d)`` token tables (globals,
    padded map, one zero row: :func:`.layout.key_table`); ``index`` ``(C, S)`` the table rows of each
    chunk's slots and ``invalid`` ``(C, 1 or w^2, S)`` its masked slots (:func:`.layout.slot_tables`);
    ``bias`` ``(H, w^2, S)`` or ``None``. Output ``(B*H, C, w^2, d)``.

    The forward saves the inputs and the output, not the ``N x S`` probabilities: the backward
    recomputes them slice by slice (one more ``q k^T`` product and softmax; a slice holds whole rows
    of slots, so no log-sum-exp needs keeping, unlike FlashAttention's blocks), so the saved memory
    is ``O(N d)`` like SDPA's. Both passes run in slices of heads and chunks (:data:`SCORE_BUDGET`),
    so the scores exist for one slice at a time.
    """

    @staticmethod
    @autocast_off
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, index: Tensor, invalid: Tensor,
                bias: Optional[Tensor]) -> Tensor:
        inputs = (q, k, v)
        q, k, v = upcast(*inputs)
        ctx.bias_dtype = None if bias is None else bias.dtype
        bias = None if bias is None else upcast(bias)[0]
        out = q.new_empty(*q.shape[:-1], v.shape[-1])
        for part in _slices(*q.shape[:3], index.shape[-1]):
            probs = _scores(q, k, index, invalid, bias, part).softmax(dim=-1)
            out[part.rows, part.chunks] = probs @ _gather(v, index, part)
        ctx.save_for_backward(*inputs, bias, out)
        ctx.index, ctx.invalid = index, invalid  # slot_tables' cached tables, not memory of this call
        return out.to(inputs[2].dtype)

    @staticmethod
    @autocast_off
    def backward(ctx, grad_out: Tensor) -> Tuple[Optional[Tensor], ...]:
        *inputs, bias, out = ctx.saved_tensors
        index, invalid = ctx.index, ctx.invalid
        q, k, v, grad_out = upcast(*inputs, grad_out)
        queries, slots = q.shape[2], index.shape[-1]
        grad_q, grad_k, grad_v = torch.empty_like(q), torch.zeros_like(k), torch.zeros_like(v)
        heads = 1 if bias is None else bias.shape[0]
        grad_bias = q.new_zeros(q.shape[0], queries, slots) if bias is not None else None
        grad_out = grad_out.contiguous()
        # sum_j p_ij dp_ij = grad_out_i . out_i: the softmax backward without a score-sized product
        row_dots = (grad_out * out).sum(dim=-1, keepdim=True)
        for part in _slices(*q.shape[:3], slots):
            rows, chunks = part
            slot_rows = index[chunks].reshape(-1)
            p = _scores(q, k, index, invalid, bias, part).softmax(dim=-1)
            g = grad_out[rows, chunks]
            add_rows_(grad_v[rows], slot_rows, p.transpose(-1, -2) @ g)
            grad_s = g @ _gather(v, index, part).transpose(-1, -2)
            grad_s -= row_dots[rows, chunks]
            grad_s *= p
            del p
            if grad_bias is not None:
                grad_bias[rows] += grad_s.sum(dim=1)
            grad_q[rows, chunks] = grad_s @ _gather(k, index, part)
            add_rows_(grad_k[rows], slot_rows, grad_s.transpose(-1, -2) @ q[rows, chunks])
        if grad_bias is not None:
            grad_bias = grad_bias.view(-1, heads, queries, slots).sum(dim=0).to(ctx.bias_dtype)
        grads = (grad_q, grad_k, grad_v)
        return (*(grad.to(x.dtype) for grad, x in zip(grads, inputs)), None, None, grad_bias)


def sliding_chunk_local_torch(q: Tensor, k: Tensor, v: Tensor, index: Tensor, invalid: Tensor,
                              bias: Optional[Tensor]) -> Tensor:
    """The local attention of every chunk (:class:`SlidingChunkAttention`). Traced
    (``torch.onnx.export``, mmengine's FLOP counter), the same arithmetic runs as plain ops on the
    whole batch: not through :func:`mmvisattn.ops.tracing.apply_function`, because the Function's
    forward writes slice by slice into a preallocated output, which tracing records wrongly."""
    if torch.jit.is_tracing():
        dtype = v.dtype
        q, k, v = upcast(q, k, v)
        everything = Slice(slice(0, q.shape[0]), slice(0, q.shape[1]))
        scores = _scores(q, k, index, invalid, None if bias is None else upcast(bias)[0], everything)
        return (scores.softmax(dim=-1) @ _gather(v, index, everything)).to(dtype)
    return SlidingChunkAttention.apply(q, k, v, index, invalid, bias)
