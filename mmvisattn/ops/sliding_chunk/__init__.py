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

Implementations (:data:`OP` says which runs where and why): ``reference`` (masked full
attention, tests only), ``dense`` (one SDPA call with the pattern as an additive bias,
:mod:`.dense`), ``torch`` (sliding chunks, hand-written backward), ``cpu`` (the same fused per chunk
in C++, :mod:`.cpu`), ``triton`` (block-sparse flash attention over whole chunks, CUDA, :mod:`.triton`)
and ``flex`` (PyTorch's FlexAttention with a block mask of the chunks, :mod:`.flex`; trains on CUDA,
forward only on CPU); ``auto`` takes Triton on CUDA where its kernels take the heads and window (else
torch) and, on CPU, ``dense`` on maps no larger than a query's window (the crossover measured in
:mod:`.dense`), ``cpu`` on larger ones. ``auto`` leaves ``flex`` to be asked for: the GPU proof times
it beside the Triton kernels at the shipped sizes and found them faster (the GPU records:
docs/records/gpu.md, docs/records/gpu_runs.md).

Random shifting passes ``mode`` as a 0-dim integer tensor holding the drawn neighbour (1..8) on the
inputs' device (:mod:`.layout`): nothing is read back, and every draw runs the same graph.
"""
from numbers import Integral
from typing import Optional, Sequence

from torch import Tensor

from ..utils.dispatch import (Op, Request, cpu_kernels, dry_output, reference_only, runs_anywhere, triton_kernels,
                        DRY_RUN)
from ..utils.triton_launch import UnsupportedInput, check_kernel_inputs
from .dense import dense_is_faster, query_slots, sliding_chunk_attention_dense
from .flex import flex_refusal, sliding_chunk_attention_flex
from .layout import DRAWN, MASKINGS, MODES, Mode, global_rows, is_drawn
from .local_global import local_plus_global
from .pytorch import sliding_chunk_local_torch
from .reference import dense_bias, sliding_chunk_attention_reference

TRITON_MAX_WINDOW = 8  # a chunk's w^2 queries form one block of at most 64 rows
TRITON_MAX_HEAD_DIMS = 64  # the backward keeps 64 queries' rows of q, its gradient and grad_out in registers


def _dense_refusal(request: Request) -> Optional[str]:
    if request.device != 'cpu':
        return 'taken on CPU below a crossover measured there (an N x N bias); elsewhere the sliding chunks run'
    if request.fact('mode') == 'drawn':
        return 'a drawn neighbour (random shifting) is picked on the device; the dense pattern is built per mode'
    hw_shape, window, num_global = request.fact('hw_shape'), request.fact('window'), request.fact('num_global')
    if not dense_is_faster(hw_shape, window, num_global, request.fact('masking'), request.fact('mode')):
        slots = query_slots(window, num_global, request.fact('mode'))
        return (f'{num_global + hw_shape[0] * hw_shape[1]} tokens against {slots} slots a query: past the '
                'crossover where the sliding chunks are faster (or some keys are visited twice)')
    return None


def _unsupported_window(window: int) -> Optional[str]:
    """Why the Triton kernels cannot take ``window``, or ``None``."""
    if window > TRITON_MAX_WINDOW:
        return f'window={window} is outside the supported range 1..{TRITON_MAX_WINDOW}'
    return None


_triton_kernels = triton_kernels(TRITON_MAX_HEAD_DIMS)


def _flex_refusal(request: Request) -> Optional[str]:
    return flex_refusal(request.device, request.grad, request.fact('hw_shape'), request.fact('window'),
                        request.fact('masking'), request.fact('mode'))


def _triton_refusal(request: Request) -> Optional[str]:
    return _triton_kernels(request) or _unsupported_window(request.fact('window'))


OP = Op('sliding_chunk_attention',
        dict(reference=reference_only, dense=_dense_refusal, torch=runs_anywhere, cpu=cpu_kernels,
             triton=_triton_refusal, flex=_flex_refusal),
        dict(cpu=('dense', 'cpu', 'torch'), cuda=('triton', 'torch')))
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


def check_triton_inputs(q: Tensor, k: Tensor, v: Tensor, window: int) -> None:
    """Fail in one line, before any work, on what the Triton kernels cannot take."""
    check_kernel_inputs('sliding_chunk_attention', (q, k, v), TRITON_MAX_HEAD_DIMS)
    reason = _unsupported_window(window)
    if reason is not None:
        raise UnsupportedInput(f"sliding_chunk_attention(impl='triton'): {reason} (impl='torch' takes any window)")


def _check_mode(mode: Mode, q: Tensor) -> None:
    if is_drawn(mode):
        if mode.dim() != 0 or mode.is_floating_point() or mode.device != q.device:
            raise ValueError(f'sliding_chunk_attention: a drawn mode must be a 0-dim integer tensor on {q.device} '
                             f'holding one of {DRAWN}; got {mode.dim()}-dim {mode.dtype} on {mode.device}')
    elif isinstance(mode, bool) or mode not in MODES:
        raise ValueError(f'sliding_chunk_attention: mode={mode!r}; expected an integer in -1..8 or a drawn '
                         'neighbour (0-dim integer tensor)')


def _check(q: Tensor, hw_shape: Sequence[int], window, num_global: int, masking: str, mode: Mode) -> int:
    window = check_window(window)
    check_masking(masking)
    _check_mode(mode, q)
    if q.dim() != 4 or q.shape[2] != num_global + hw_shape[0] * hw_shape[1]:
        raise ValueError(f'sliding_chunk_attention: q of shape {tuple(q.shape)} does not hold {num_global} global '
                         f'+ {hw_shape[0]}x{hw_shape[1]} tokens as (B, heads, N, d)')
    return window


def sliding_chunk_attention(q: Tensor, k: Tensor, v: Tensor, hw_shape: Sequence[int], window: int,
                            num_global: int = 0, masking: str = 'chunk', mode: Mode = 0,
                            rel_pos: Optional[Sequence[Optional[Tensor]]] = None, scale: Optional[float] = None,
                            impl: str = 'auto') -> Tensor:
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
    request = Request.of((q, k, v), hw_shape=hw_shape, window=window, num_global=num_global, masking=masking,
                         mode='drawn' if is_drawn(mode) else mode)
    impl = OP.choose(impl, request)
    if impl == DRY_RUN:
        return dry_output(q, v)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    if impl == 'reference':
        return sliding_chunk_attention_reference(q, k, v, hw_shape, window, num_global, masking,
                                                 int(mode), rel_pos, scale)
    if impl == 'dense':
        if is_drawn(mode):
            raise ValueError(f"sliding_chunk_attention(impl='dense'): {_dense_refusal(request)}; "
                             "expected impl='torch', 'cpu' or 'triton' for random shifting")
        return sliding_chunk_attention_dense(q, k, v, hw_shape, window, num_global, masking, mode, rel_pos, scale)
    if impl == 'flex':
        reason = _flex_refusal(request)
        if reason is not None:
            raise UnsupportedInput(f"sliding_chunk_attention(impl='flex'): {reason}")
        return sliding_chunk_attention_flex(q, k, v, hw_shape, window, num_global, masking, mode, rel_pos, scale)
    if impl == 'triton':
        check_triton_inputs(q, k, v, window)
        from .triton import sliding_chunk_attention_triton
        return sliding_chunk_attention_triton(q, k, v, hw_shape, window, num_global, masking, mode, rel_pos, scale)
    if impl == 'cpu':
        from .cpu import sliding_chunk_local_cpu as local_attention
    else:
        local_attention = sliding_chunk_local_torch
    return local_plus_global(q, k, v, hw_shape, window, num_global, masking, mode, rel_pos, scale, local_attention)


# global_rows: the global tokens' own attention (queries and keys in full), which modules with
# separate global projections compute themselves; dense_bias: the attention map's additive bias.
__all__ = ['sliding_chunk_attention', 'sliding_chunk_attention_reference', 'check_window', 'check_masking',
           'dense_bias', 'global_rows', 'IMPLS', 'OP', 'MASKINGS', 'MODES', 'DRAWN']
