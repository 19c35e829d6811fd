"""Sliding-chunk local attention in torch with a hand-written backward (arXiv:2103.15358, App. C).

Each query chunk multiplies its ``w^2`` queries with the ``S <= G + 9 w^2`` keys its slots gather
(:mod:`.layout`), in groups by live slots (:func:`.layout.chunk_groups`). The forward keeps inputs,
output and slot tables; the backward rebuilds the probabilities slice by slice within
:data:`SCORE_BUDGET`, so saved memory grows as SDPA's.

Mixed precision: autocast off, float32 arithmetic (half logits overflow); the output in ``v``'s
dtype, gradients in their inputs'.
"""
from typing import Iterator, List, NamedTuple, Optional, Sequence, Tuple

import torch
from torch import Tensor

from ..utils.amp import autocast_off, upcast
from ..utils.recompute import runs
from ..utils.token_grid import add_rows_
from .layout import ChunkGroup, Mode
from .local_global import local_plus_global

# score entries of one slice (rows of B*H by chunks): bounds transient memory within cache
SCORE_BUDGET = 1 << 18


class Slice(NamedTuple):
    rows: slice  # of the B*H axis
    group: ChunkGroup
    span: slice  # of the group's chunks


def _slices(batch_heads: int, queries: int, group: ChunkGroup) -> List[Slice]:
    """Whole rows of ``B*H`` per slice while the group's chunks fit :data:`SCORE_BUDGET`, else runs
    of its chunks of one row."""
    chunks, per_chunk = group.index.shape[0], queries * group.index.shape[1]
    if chunks * per_chunk <= SCORE_BUDGET:
        whole = slice(0, chunks)
        return [Slice(rows, group,
                      whole) for rows in runs(batch_heads, SCORE_BUDGET // (chunks * per_chunk))]
    return [Slice(slice(row, row + 1), group, part) for row in range(batch_heads)
            for part in runs(chunks, max(1, SCORE_BUDGET // per_chunk))]


def _group_slices(batch_heads: int, queries: int, groups: Tuple[ChunkGroup, ...],
                  bias: Optional[Tensor]) -> Iterator[Tuple[Slice, Optional[Tensor]]]:
    """Every slice of every group with the group's bias (:func:`_group_bias`), cut once per group
    and alive for one group at a time."""
    for group in groups:
        group_bias = _group_bias(bias, group)
        for part in _slices(batch_heads, queries, group):
            yield part, group_bias


def _chunks_of(x: Tensor, part: Slice) -> Tensor:
    """The ``(b, c, w^2, d)`` chunks of ``part`` from ``(B*H, C, w^2, d)`` (a copy unless they are
    consecutive)."""
    rows = x[part.rows]
    if part.group.chunks is None:
        return rows[:, part.span]
    return rows.index_select(1, part.group.chunks[part.span])


def _put_chunks(x: Tensor, part: Slice, values: Tensor) -> None:
    """Write the chunks of ``part`` into ``(B*H, C, w^2, d)`` ``x``."""
    rows = x[part.rows]
    if part.group.chunks is None:
        rows[:, part.span] = values
    else:
        rows.index_copy_(1, part.group.chunks[part.span], values)


def _gather(table: Tensor, part: Slice) -> Tensor:
    """The ``(b, c, s, d)`` slot keys (or values) of ``part``'s chunks by one ``index_select`` of
    the token table, globals included (no ``cat``); adjoint
    :func:`~mmvisattn.ops.utils.token_grid.add_rows_`."""
    rows = table[part.rows]
    slots = part.group.index[part.span]
    return rows.index_select(1, slots.reshape(-1)).view(rows.shape[0], *slots.shape, rows.shape[-1])


def _group_bias(bias: Optional[Tensor], group: ChunkGroup) -> Optional[Tensor]:
    """The ``(H, w^2, s)`` bias of the group's live columns."""
    if bias is None or group.columns is None:
        return bias
    return bias.index_select(2, group.columns)


def _bias_rows(bias: Optional[Tensor], rows: slice) -> Optional[Tensor]:
    """The ``(b, 1, w^2, s)`` bias of ``rows`` of the ``B*H`` axis (heads cycle fastest)."""
    if bias is None:
        return None
    return bias[torch.arange(rows.start, rows.stop, device=bias.device) % bias.shape[0]][:, None]


def _scores(q: Tensor, k: Tensor, bias: Optional[Tensor], part: Slice) -> Tensor:
    """The ``q k_slots^T + bias`` of the slice's query chunks ``q``, ``-inf`` on its masked slots;
    the gathered keys live only inside this call. ``bias`` is the group's (:func:`_group_bias`)."""
    scores = q @ _gather(k, part).transpose(-1, -2)
    bias = _bias_rows(bias, part.rows)
    if bias is not None:
        scores += bias
    if part.group.invalid is None:
        return scores
    # -inf added, not masked_fill_: filling through a mask broadcast over the heads is some 6x
    # slower on CPU than filling the small mask itself and adding it
    blocked = part.group.invalid[part.span]
    return scores.add_(torch.zeros(blocked.shape, dtype=scores.dtype, device=scores.device)
                       .masked_fill_(blocked, float('-inf')))


class SlidingChunkAttention(torch.autograd.Function):
    """``softmax(q k_slots^T + bias, masked) v_slots`` per chunk.

    ``q`` ``(B*H, C, w^2, d)`` scaled query chunks; ``k``, ``v`` ``(B*H, T, d)`` token tables
    (:func:`.layout.key_table`); ``bias`` ``(H, w^2, S)`` or ``None``; ``groups``
    (:func:`.layout.chunk_groups`) run on their live slots. Saves inputs and output; the backward
    recomputes probabilities within :data:`SCORE_BUDGET`.
    """

    @staticmethod
    @autocast_off
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, bias: Optional[Tensor],
                groups: Tuple[ChunkGroup, ...]) -> Tensor:
        inputs = (q, k, v)
        q, k, v = upcast(*inputs)
        ctx.bias_dtype = None if bias is None else bias.dtype
        bias = None if bias is None else upcast(bias)[0]
        out = q.new_empty(*q.shape[:-1], v.shape[-1])
        for part, group_bias in _group_slices(q.shape[0], q.shape[2], groups, bias):
            probs = _scores(_chunks_of(q, part), k, group_bias, part).softmax(dim=-1)
            _put_chunks(out, part, probs @ _gather(v, part))
        ctx.save_for_backward(*inputs, bias, out)
        ctx.groups = groups  # cached tables (or one step's picked ones), not memory of this call
        return out.to(inputs[2].dtype)

    @staticmethod
    @autocast_off
    def backward(ctx, grad_out: Tensor) -> Tuple[Optional[Tensor], ...]:
        *inputs, bias, out = ctx.saved_tensors
        q, k, v, grad_out = upcast(*inputs, grad_out)
        grad_q, grad_k, grad_v = torch.empty_like(q), torch.zeros_like(k), torch.zeros_like(v)
        grad_bias = None if bias is None else q.new_zeros(q.shape[0], *bias.shape[1:])
        grad_out = grad_out.contiguous()
        # sum_j p_ij dp_ij = grad_out_i . out_i: the softmax backward without a score-sized product
        row_dots = (grad_out * out).sum(dim=-1, keepdim=True)
        buffers = (grad_q, grad_k, grad_v, grad_bias)
        for part, group_bias in _group_slices(q.shape[0], q.shape[2], ctx.groups, bias):
            _backward_slice(part, q, k, v, group_bias, grad_out, row_dots, buffers)
        if grad_bias is not None:
            grad_bias = grad_bias.view(-1, *bias.shape).sum(dim=0).to(ctx.bias_dtype)
        grads = (grad_q, grad_k, grad_v)
        return (*(grad.to(x.dtype) for grad, x in zip(grads, inputs)), grad_bias, None)


def _backward_slice(part: Slice, q: Tensor, k: Tensor, v: Tensor, bias: Optional[Tensor],
                    grad_out: Tensor, row_dots: Tensor,
                    grads: Tuple[Tensor, Tensor, Tensor, Optional[Tensor]]) -> None:
    """Add one slice's share into the gradients of ``q, k, v`` and the bias (rows of ``B*H``)."""
    grad_q, grad_k, grad_v, grad_bias = grads
    slot_rows = part.group.index[part.span].reshape(-1)
    q_part = _chunks_of(q, part)
    p = _scores(q_part, k, bias, part).softmax(dim=-1)
    g = _chunks_of(grad_out, part)
    add_rows_(grad_v[part.rows], slot_rows, p.transpose(-1, -2) @ g)
    grad_s = g @ _gather(v, part).transpose(-1, -2)
    grad_s -= _chunks_of(row_dots, part)
    grad_s *= p
    del p
    if grad_bias is not None:
        _add_bias_grad_(grad_bias[part.rows], part.group, grad_s.sum(dim=1))
    _put_chunks(grad_q, part, grad_s @ _gather(k, part))
    add_rows_(grad_k[part.rows], slot_rows, grad_s.transpose(-1, -2) @ q_part)


def _add_bias_grad_(grad_bias: Tensor, group: ChunkGroup, grad: Tensor) -> None:
    """Add a slice's ``(b, w^2, s)`` bias gradient into the ``(b, w^2, S)`` rows of all slots."""
    if group.columns is None:
        grad_bias += grad
    else:
        grad_bias.index_add_(2, group.columns, grad)


def _traced(q: Tensor, k: Tensor, v: Tensor, bias: Optional[Tensor],
            groups: Tuple[ChunkGroup, ...]) -> Tensor:
    """The Function's arithmetic as plain ops, group by group, joined back in chunk order by one
    ``index_select``."""
    outputs = []
    for group in groups:
        part = Slice(slice(0, q.shape[0]), group, slice(0, group.index.shape[0]))
        scores = _scores(_chunks_of(q, part), k, _group_bias(bias, group), part)
        outputs.append(scores.softmax(dim=-1) @ _gather(v, part))
    if len(groups) == 1:  # the only group holds every chunk, in order
        return outputs[0]
    return torch.cat(outputs,
                     dim=1).index_select(1, torch.cat([group.chunks for group in groups]).argsort())


def sliding_chunk_local_torch(q: Tensor, k: Tensor, v: Tensor, index: Tensor, invalid: Tensor,
                              bias: Optional[Tensor],
                              groups: Optional[Tuple[ChunkGroup, ...]]) -> Tensor:
    """The local attention of every chunk on the slot tables by the layout's ``groups`` (a drawn
    mode, ``groups=None``, runs one group on all slots). Traced, as plain ops (:func:`_traced`): the
    Function writes into a preallocated output, which tracing records wrongly."""
    groups = (ChunkGroup(None, None, index, invalid),) if groups is None else groups
    if torch.jit.is_tracing():
        dtype = v.dtype
        q, k, v = upcast(q, k, v)
        return _traced(q, k, v, None if bias is None else upcast(bias)[0], groups).to(dtype)
    return SlidingChunkAttention.apply(q, k, v, bias, groups)


def sliding_chunk_attention_torch(q: Tensor, k: Tensor, v: Tensor, hw_shape: Sequence[int],
                                  window: int, num_global: int, masking: str, mode: Mode,
                                  rel_pos: Optional[Sequence[Optional[Tensor]]],
                                  scale: float) -> Tensor:
    """Vision Longformer attention with the local queries by torch chunks."""
    return local_plus_global(q, k, v, hw_shape, window, num_global, masking, mode, rel_pos, scale,
                             sliding_chunk_local_torch)
