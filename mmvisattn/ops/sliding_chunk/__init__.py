"""Vision Longformer attention, "Multi-Scale Vision Longformer" (arXiv:2103.15358, Sec. 3.2, App. C, D).

Tokens are ``G`` global tokens followed by an ``h x w`` map. A local query attends to the global
tokens and to a 2-D window of the map; a global query attends to every token. The window is
computed with sliding chunks: the map is cut into ``w x w`` chunks and the queries of a chunk attend
to the ``3 x 3`` chunks around it (window ``2w+1`` or more), under one of three masking modes:

* ``'exact'``: only keys within ``w`` of the query along both axes (the conv-like ``(2w+1)^2`` window);
* ``'chunk'`` (default): whole neighbour chunks, none beyond the border ("without padding");
* ``'cyclic'``: whole neighbour chunks, the chunk grid wrapped around at the border.

``mode`` selects the neighbour chunks (App. D): 0 all eight, -1 none (own chunk only), ``i`` in
1..8 the own chunk and neighbour ``i`` (random-shifting training draws ``i`` per step).
Relative-position bias ``rel_pos = (table, g2l, g2g)`` as in the official code: ``table``
``((4w-1)^2, heads)`` for local-local pairs, ``g2l`` ``(2, heads, G)`` (row 0: global query to a
local key, row 1: local query to a global key), ``g2g`` ``(heads, G, G)``.

Implementations: ``reference`` (masked full attention, tests only), ``dense`` (one SDPA call with the
pattern as an additive bias, :mod:`.dense`), ``torch`` (sliding chunks, hand-written backward),
``cpu`` (the same fused per chunk in C++, :mod:`.cpu`) and ``triton`` (fused kernels); ``auto`` picks
Triton for CUDA tensors and, on CPU, ``dense`` on maps no larger than a query's window (the
crossover measured in :mod:`.dense`), ``cpu`` on larger ones.
"""
from numbers import Integral
from typing import Optional, Sequence

import torch
from torch import Tensor

from ..dispatch import resolve_impl
from .dense import dense_is_faster, sliding_chunk_attention_dense
from .pytorch import sliding_chunk_local_torch
from .layout import (MASKINGS, MODES, from_chunks, global_rows, key_table, slot_bias, slot_tables,
                     table_padding, to_chunks)
from .reference import dense_bias, sliding_chunk_attention_reference

IMPLS = ('auto', 'reference', 'dense', 'torch', 'cpu', 'triton')


def check_window(window, owner: str = 'sliding_chunk_attention') -> int:
    """``window`` must be a positive integer (``bool`` excluded); returns it as ``int``."""
    if isinstance(window, bool) or not isinstance(window, Integral) or window < 1:
        raise ValueError(f'{owner}: window={window!r}; expected a positive integer')
    return int(window)


def _check(q: Tensor, hw_shape: Sequence[int], window, num_global: int, masking: str, mode: int) -> int:
    window = check_window(window)
    if masking not in MASKINGS:
        raise ValueError(f'sliding_chunk_attention: masking={masking!r}; expected one of {MASKINGS}')
    if isinstance(mode, bool) or mode not in MODES:
        raise ValueError(f'sliding_chunk_attention: mode={mode!r}; expected an integer in -1..8')
    if q.dim() != 4 or q.shape[2] != num_global + hw_shape[0] * hw_shape[1]:
        raise ValueError(f'sliding_chunk_attention: q of shape {tuple(q.shape)} does not hold {num_global} global '
                         f'+ {hw_shape[0]}x{hw_shape[1]} tokens as (B, heads, N, d)')
    return window


def sliding_chunk_attention(q: Tensor, k: Tensor, v: Tensor, hw_shape: Sequence[int], window: int,
                            num_global: int = 0, masking: str = 'chunk', mode: int = 0,
                            rel_pos: Optional[Sequence[Optional[Tensor]]] = None, scale: Optional[float] = None,
                            impl: str = 'auto') -> Tensor:
    """Longformer attention of ``(B, heads, G + h*w, d)`` tensors -> ``(B, heads, G + h*w, d)``.

    Args:
        hw_shape: ``(h, w)`` of the map. window: chunk side ``w`` (attention window ``2w+1``);
        larger than the map is legal (one chunk then covers it all). num_global: ``G``.
        masking: ``'chunk' | 'exact' | 'cyclic'``. mode: -1, 0 or 1..8. rel_pos: see the module
        docstring. scale: defaults to ``d ** -0.5``. impl: one of :data:`IMPLS`.
    """
    hw_shape = (int(hw_shape[0]), int(hw_shape[1]))
    window = _check(q, hw_shape, window, num_global, masking, mode)
    impl = resolve_impl('sliding_chunk_attention', impl, q, IMPLS,
                        lambda: dense_is_faster(hw_shape, window, num_global, masking, mode, q.device))
    if impl == 'reference':
        return sliding_chunk_attention_reference(q, k, v, hw_shape, window, num_global, masking, mode, rel_pos, scale)
    if impl == 'dense':
        return sliding_chunk_attention_dense(q, k, v, hw_shape, window, num_global, masking, mode, rel_pos,
                                             q.shape[-1] ** -0.5 if scale is None else scale)
    if impl == 'triton':
        from .triton import check_triton_inputs
        check_triton_inputs(q, k, v, window)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    batch, heads = q.shape[:2]
    index, invalid = slot_tables(hw_shape, window, num_global, masking, mode, q.device)
    bias = slot_bias(rel_pos, window, num_global, mode, heads)
    chunks = to_chunks(q[:, :, num_global:] * scale, hw_shape, window)
    keys, values = key_table(k, hw_shape, window, num_global), key_table(v, hw_shape, window, num_global)
    local_attention = sliding_chunk_local_torch
    if impl == 'cpu':
        from .cpu import sliding_chunk_local_cpu as local_attention
    if impl == 'triton':
        from .triton import sliding_chunk_local_triton as local_attention
    local = local_attention(chunks, keys, values, index, invalid, bias)
    local = from_chunks(local, batch, hw_shape, window)
    if num_global == 0:
        return local
    # the global rows read the key tables the local attention saves, not a second copy of k and v
    table_shape = (batch, heads, -1, k.shape[-1])
    glob = global_rows(q[:, :, :num_global] * scale, keys.view(table_shape), values.view(table_shape), rel_pos,
                       table_padding(hw_shape, window, num_global, q.device))
    return torch.cat([glob, local], dim=2)


# global_rows: the global tokens' own attention (queries and keys in full), which modules with
# separate global projections compute themselves; dense_bias: the attention map's additive bias.
__all__ = ['sliding_chunk_attention', 'sliding_chunk_attention_reference', 'check_window', 'dense_bias',
           'global_rows', 'IMPLS', 'MASKINGS', 'MODES']
