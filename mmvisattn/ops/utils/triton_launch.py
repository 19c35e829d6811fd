"""What the Triton kernels accept and how many warps they launch with: float32, float16 or bfloat16
loaded, multiplied in that precision (:func:`dot_operands`) and accumulated in float32 (float64:
``impl='torch'``); heads at most :data:`MAX_HEAD_DIMS` wide.
"""
from typing import Optional

import torch

from . import machine

KERNEL_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
MAX_HEAD_DIMS = 128


def unsupported_kernel_input(dtype: torch.dtype, head_dims: int,
                             max_head_dims: Optional[int] = None) -> Optional[str]:
    """Why the Triton kernels cannot take tensors of ``dtype`` with heads ``head_dims`` wide (at
    most ``max_head_dims``, default :data:`MAX_HEAD_DIMS`), or ``None``."""
    max_head_dims = max_head_dims or MAX_HEAD_DIMS
    if dtype not in KERNEL_DTYPES:
        names = ', '.join(str(kind).replace('torch.', '') for kind in KERNEL_DTYPES)
        return f"dtype {str(dtype).replace('torch.', '')} is not supported; expected one of {names}"
    if not 1 <= head_dims <= max_head_dims:
        return f'head width {head_dims} is outside the supported range 1..{max_head_dims}'
    return None


def head_block(width: int) -> int:
    """Columns a head of ``width`` is padded to: a power of two, at least 16 (``tl.dot``)."""
    return max(16, 1 << (width - 1).bit_length())


def dot_operands(dtype: torch.dtype):
    """The ``tl.dot`` operand dtype for inputs of ``dtype``: their own (half tensor cores, TF32),
    but float32 for bfloat16 under ``TRITON_INTERPRET=1``, whose ``tl.dot`` multiplies bit patterns
    as integers."""
    import triton.language as tl
    if dtype == torch.bfloat16 and machine.triton_interpreted():
        return tl.float32
    return {torch.float32: tl.float32, torch.float16: tl.float16,
            torch.bfloat16: tl.bfloat16}[dtype]


def num_warps(head_block: int) -> int:
    """Warps per program for a head padded to ``head_block`` columns: 8 above 64, where 4 warps left
    the kernels' register-held rows spilling (compile_kernels.py at 128 on sm_80 and sm_90)."""
    return 4 if head_block <= 64 else 8
