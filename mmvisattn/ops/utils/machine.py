"""What the ops read of the machine: each fact a function, read on first use and kept.

``torch.compile`` takes each result as a constant (the checks run on every call, the compiler's
tracer included). Tests set them through the ``machine`` fixture of ``tests/conftest.py``."""
import functools
import os
from importlib.util import find_spec
from typing import Callable, Optional, Tuple, TypeVar

import torch

T = TypeVar('T')


def _fact(function: Callable[[], T]) -> Callable[[], T]:
    """``function`` read once (``lru_cache`` without the wrapper Dynamo would trace through)."""
    kept = []

    @torch.compiler.assume_constant_result
    @functools.wraps(function)
    def read() -> T:
        if not kept:
            kept.append(function())
        return kept[0]
    return read


@_fact
def triton_interpreted() -> bool:
    """``TRITON_INTERPRET=1``: Triton's interpreter runs the kernels on CPU tensors (read as Triton
    reads it, once)."""
    return os.environ.get('TRITON_INTERPRET') == '1'


@_fact
def installed_triton() -> Optional[Tuple[int, ...]]:
    """The installed Triton's (major, minor), or ``None``."""
    if find_spec('triton') is None:
        return None
    from importlib.metadata import PackageNotFoundError, version
    try:
        return tuple(int(part) for part in version('triton').split('.')[:2])
    except (PackageNotFoundError, ValueError):
        return None


@_fact
def cuda_capability() -> Optional[Tuple[int, int]]:
    """The current CUDA device's compute capability, or ``None`` without one (read on first use, not
    on import: that would start CUDA in every process importing the package)."""
    return torch.cuda.get_device_capability() if torch.cuda.is_available() else None
