"""What the slot-table paths of Vision Longformer share (arXiv:2103.15358, Sec. 3.2, App. C): the
map cut into ``w x w`` chunks, the key and value tables every chunk's queries read through the slot
tables (:mod:`.layout`), and the global queries' rows in full; the torch and C++ backends supply the
attention of the local queries (:data:`LocalAttention`).
"""
from typing import Callable, Optional, Sequence, Tuple

import torch
from torch import Tensor

from .layout import (
    ChunkGroup,
    Mode,
    chunk_groups,
    from_chunks,
    global_rows,
    is_drawn,
    key_table,
    slot_bias,
    slot_tables,
    table_padding,
    to_chunks,
)

# (chunks, keys, values, index, invalid, bias, groups) -> the local queries' outputs, chunk by
# chunk; groups: the layout's chunk groups, None for tables picked on the device for a drawn mode
LocalAttention = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor, Optional[Tensor],
                           Optional[Tuple[ChunkGroup, ...]]], Tensor]


def key_tables(k: Tensor, v: Tensor, hw_shape: Sequence[int], window: int,
               num_global: int) -> Tuple[Tensor, Tensor]:
    """The key and value tables (:func:`.layout.key_table`), built in one pass over ``k`` and ``v``
    stacked on the batch where they have one shape: half the glue launches on a GPU."""
    if k.shape != v.shape:
        return key_table(k, hw_shape, window,
                         num_global), key_table(v, hw_shape, window, num_global)
    keys, values = key_table(torch.cat([k, v]), hw_shape, window, num_global).chunk(2)
    return keys, values


def local_plus_global(q: Tensor, k: Tensor, v: Tensor, hw_shape: Sequence[int], window: int,
                      num_global: int,
                      masking: str, mode: Mode, rel_pos: Optional[Sequence[Optional[Tensor]]],
                      scale: float, local_attention: LocalAttention) -> Tensor:
    """The local queries by sliding chunks through ``local_attention``, the global ones in full."""
    batch, heads = q.shape[:2]
    index, invalid = slot_tables(hw_shape, window, num_global, masking, mode, q.device)
    bias = slot_bias(rel_pos, window, num_global, mode, heads)
    chunks = to_chunks(q[:, :, num_global:] * scale, hw_shape, window)
    keys, values = key_tables(k, v, hw_shape, window, num_global)
    groups = None if is_drawn(mode) else chunk_groups(hw_shape, window, num_global, masking, mode,
                                                      q.device)
    local = local_attention(chunks, keys, values, index, invalid, bias, groups)
    local = from_chunks(local, batch, hw_shape, window)
    if num_global == 0:
        return local
    # the global rows read the key tables the local attention saves, not a second copy of k and v
    table_shape = (batch, heads, -1, k.shape[-1])
    glob = global_rows(q[:, :, :num_global] * scale, keys.view(table_shape),
                       values.view(table_shape), rel_pos,
                       table_padding(hw_shape, window, num_global, q.device))
    return torch.cat([glob, local], dim=2)
