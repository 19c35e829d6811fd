"""Vision Longformer attention, "Multi-Scale Vision Longformer" (arXiv:2103.15358, Sec. 3.2, App. C,
D).

``G`` global tokens, then an ``h x w`` map. A local query attends to the global tokens and a 2-D
window; a global query to every token. The map is cut into ``w x w`` chunks whose queries attend to
the ``3 x 3`` chunks around, masked as ``'exact'`` (the ``(2w+1)^2`` window), ``'chunk'`` (whole
chunks, none beyond the border; default) or ``'cyclic'`` (wrapped). ``mode`` (App. D): 0 all eight
neighbours, -1 none, ``i`` in 1..8 one (random shifting passes it as a 0-dim device tensor: one
graph for every draw). ``rel_pos = (table, g2l, g2g)`` as the official code: ``((4w-1)^2, heads)``,
``(2, heads, G)``, ``(heads, G, G)``.

Backends in ``auto``'s order (:data:`OP`): ``triton`` (block-sparse flash attention, CUDA),
``dense`` (one SDPA call with the pattern as bias, small CPU maps), ``cpu`` (C++) and ``torch``, all
tested against :func:`sliding_chunk_attention_reference`."""
from numbers import Integral
from typing import NamedTuple, Optional, Sequence, Tuple

from torch import Tensor

from ..utils.dispatch import (
    Backend,
    Op,
    Request,
    cpu_kernels,
    interpreted,
    opaque_to_dispatch,
    triton_kernels,
)
from .cpu import sliding_chunk_attention_cpu
from .dense import dense_is_faster, query_slots, sliding_chunk_attention_dense, visits_once
from .layout import (
    DRAWN,
    MASKINGS,
    MODES,
    NEIGHBOURS,
    Mode,
    from_chunks,
    global_rows,
    is_drawn,
    neighbour_chunk,
    pick_drawn,
    relative_index,
    to_chunks,
    visited_neighbours,
)
from .pytorch import sliding_chunk_attention_torch
from .reference import dense_bias, sliding_chunk_attention_reference

TRITON_MAX_WINDOW = 8  # a chunk's w^2 queries form one block of at most 64 rows
# the backward keeps 64 queries' rows of q, its gradient and grad_out in registers
TRITON_MAX_HEAD_DIMS = 64
_triton_kernels = triton_kernels(TRITON_MAX_HEAD_DIMS)


class Options(NamedTuple):
    """What of a call decides the backend beside its tensors."""
    hw_shape: Tuple[int, int]
    window: int
    num_global: int
    masking: str
    mode: Mode


def _triton_unsupported(request: Request) -> Optional[str]:
    reason, window = _triton_kernels(request), request.options.window
    if reason is None and window > TRITON_MAX_WINDOW:
        return f'window={window} is outside the supported range 1..{TRITON_MAX_WINDOW}'
    return reason


def _dense_unsupported(request: Request) -> Optional[str]:
    hw_shape, window, _, masking, mode = request.options
    if mode == 'drawn':
        return ('a drawn neighbour (random shifting) is picked on the device; the dense pattern is '
                'built per mode')
    if not visits_once(hw_shape, window, masking, mode):
        return (f'masking={masking!r} on a {hw_shape[0]}x{hw_shape[1]} map of window {window} '
                'visits some keys twice; the dense bias holds one per pair')
    return None


def _dense_passed_over(request: Request) -> Optional[str]:
    if request.device != 'cpu':
        return 'its crossover is measured on CPU; on other devices the sliding chunks run'
    hw_shape, window, num_global, _, mode = request.options
    if dense_is_faster(hw_shape, window, num_global, mode):
        return None
    return (f'{num_global + hw_shape[0] * hw_shape[1]} tokens against '
            f'{query_slots(window, num_global, mode)} '
            'slots a query: past the crossover where the sliding chunks are faster')


def _triton(*args) -> Tensor:
    from .triton import sliding_chunk_attention_triton  # Triton loads on the first call
    return sliding_chunk_attention_triton(*args)


OP = Op('sliding_chunk_attention', [
    Backend('triton', _triton, _triton_unsupported, interpreted),
    Backend('dense', sliding_chunk_attention_dense, _dense_unsupported, _dense_passed_over),
    Backend('cpu', sliding_chunk_attention_cpu, cpu_kernels, opaque_to_dispatch),
    Backend('torch', sliding_chunk_attention_torch),
])
IMPLS = OP.impls


def check_window(window, owner: str = 'sliding_chunk_attention') -> int:
    """``window`` must be a positive integer (``bool`` excluded); returns it as ``int``."""
    if isinstance(window, bool) or not isinstance(window, Integral) or window < 1:
        raise ValueError(f'{owner}: window={window!r}; expected a positive integer')
    return int(window)


def check_masking(masking: str, owner: str = 'sliding_chunk_attention') -> str:
    """``masking`` must be one of :data:`MASKINGS`."""
    if masking not in MASKINGS:
        raise ValueError(f'{owner}: masking={masking!r}; expected one of {MASKINGS}')
    return masking


def _check_mode(mode: Mode, q: Tensor) -> None:
    if is_drawn(mode):
        if mode.dim() != 0 or mode.is_floating_point() or mode.device != q.device:
            raise ValueError('sliding_chunk_attention: a drawn mode must be a 0-dim integer tensor '
                             f'on {q.device} holding one of {DRAWN}; got {mode.dim()}-dim '
                             f'{mode.dtype} on {mode.device}')
    elif isinstance(mode, bool) or mode not in MODES:
        raise ValueError(f'sliding_chunk_attention: mode={mode!r}; expected an integer in -1..8 or '
                         'a drawn neighbour (0-dim integer tensor)')


def _check(q: Tensor, hw_shape: Sequence[int], window, num_global: int, masking: str,
           mode: Mode) -> int:
    window = check_window(window)
    check_masking(masking)
    _check_mode(mode, q)
    if q.dim() != 4 or q.shape[2] != num_global + hw_shape[0] * hw_shape[1]:
        raise ValueError(f'sliding_chunk_attention: q of shape {tuple(q.shape)} does not hold '
                         f'{num_global} global '
                         f'+ {hw_shape[0]}x{hw_shape[1]} tokens as (B, heads, N, d)')
    return window


def sliding_chunk_attention(q: Tensor, k: Tensor, v: Tensor, hw_shape: Sequence[int], window: int,
                            num_global: int = 0, masking: str = 'chunk', mode: Mode = 0,
                            rel_pos: Optional[Sequence[Optional[Tensor]]] = None,
                            scale: Optional[float] = None, impl: str = 'auto') -> Tensor:
    """Vision Longformer attention: local queries by sliding chunks, global queries in full.

    Args:
        q, k, v: ``(B, heads, G + h * w, d)`` tensors, the ``G`` global tokens first.
        hw_shape: ``(h, w)`` of the map.
        window: Chunk side ``w`` (attention window ``2w + 1``); larger than the map is legal (one
            chunk then covers it all).
        num_global: ``G``.
        masking: ``'chunk' | 'exact' | 'cyclic'``.
        mode: -1, 0 or 1..8, or a drawn neighbour (a 0-dim integer tensor on the inputs' device
            holding 1..8).
        rel_pos: ``(table, g2l, g2g)`` relative-position biases (see the module docstring) or None.
        scale: Defaults to ``d ** -0.5``.
        impl: One of :data:`IMPLS`.

    Returns:
        ``(B, heads, G + h * w, d)``.
    """
    hw_shape = (int(hw_shape[0]), int(hw_shape[1]))
    window = _check(q, hw_shape, window, num_global, masking, mode)
    request = Request.of((q, k, v), Options(hw_shape, window, num_global, masking,
                                            'drawn' if is_drawn(mode) else mode))
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    return OP(impl, request, q, k, v, hw_shape, window, num_global, masking, mode, rel_pos, scale)


# global_rows: the global tokens' own attention; dense_bias: the attention map's bias; the chunk
# layout (DRAWN to visited_neighbours) for backends outside the package (lab/experimental)
__all__ = ['sliding_chunk_attention', 'sliding_chunk_attention_reference', 'check_window',
           'check_masking', 'dense_bias', 'global_rows', 'IMPLS', 'OP', 'Options', 'DRAWN',
           'NEIGHBOURS', 'Mode', 'from_chunks', 'is_drawn', 'neighbour_chunk', 'pick_drawn',
           'relative_index', 'to_chunks', 'visited_neighbours']
