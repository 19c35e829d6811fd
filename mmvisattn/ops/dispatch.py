"""The one dispatch rule of every op with several implementations.

Each op lists its implementations in ``IMPLS``, one file per value (``reference.py``, the torch
path, ``triton.py``); ``impl='auto'`` runs the Triton kernel on CUDA tensors and the torch path
elsewhere. Modules check their ``impl`` when they are built, ops when they are called, both with
:func:`check_impl`, so a bad value fails the same way everywhere.
"""
from typing import Sequence

from torch import Tensor


def check_impl(owner: str, impl: str, impls: Sequence[str], name: str = 'impl') -> str:
    """``impl``, or a one-line ``ValueError`` naming ``owner``, the argument ``name`` and the
    values it accepts."""
    if impl not in impls:
        raise ValueError(f'{owner}: {name}={impl!r}; expected one of {tuple(impls)}')
    return impl


def resolve_impl(owner: str, impl: str, tensor: Tensor, impls: Sequence[str]) -> str:
    """The implementation to run: ``impl`` checked, with ``'auto'`` resolved for ``tensor``'s device."""
    if check_impl(owner, impl, impls) == 'auto':
        return 'triton' if tensor.is_cuda and 'triton' in impls else 'torch'
    return impl
