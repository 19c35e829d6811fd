"""The one dispatch rule of every op with several implementations.

Each op lists its implementations in ``IMPLS``, one file per value (``reference.py``, the torch
path, ``cpu.py`` with its C++ ``cpu.cpp``, ``triton.py``, ``dense.py``); ``impl='auto'`` runs the
Triton kernel on CUDA tensors and, elsewhere, the C++ kernels where the op has them and the torch
path otherwise, except that an op with a dense form (``'dense'``: the same arithmetic over all
``N x N`` pairs) runs it on CPU where its measured crossover says the map is small enough for that
to be faster. Modules check their ``impl`` when they are built, ops when they are called, both with
:func:`check_impl`, so a bad value fails the same way everywhere.
"""
from typing import Callable, Sequence

from torch import Tensor


def check_impl(owner: str, impl: str, impls: Sequence[str], name: str = 'impl') -> str:
    """``impl``, or a one-line ``ValueError`` naming ``owner``, the argument ``name`` and the
    values it accepts."""
    if impl not in impls:
        raise ValueError(f'{owner}: {name}={impl!r}; expected one of {tuple(impls)}')
    return impl


def resolve_impl(owner: str, impl: str, tensor: Tensor, impls: Sequence[str],
                 dense_is_faster: Callable[[], bool] = lambda: False) -> str:
    """The implementation to run: ``impl`` checked, with ``'auto'`` resolved for ``tensor``'s device
    and, on CPU, the op's crossover ``dense_is_faster()`` (asked only there)."""
    if check_impl(owner, impl, impls) != 'auto':
        return impl
    if tensor.is_cuda and 'triton' in impls:
        return 'triton'
    if 'dense' in impls and dense_is_faster():
        return 'dense'
    return 'cpu' if 'cpu' in impls and tensor.device.type == 'cpu' else 'torch'
