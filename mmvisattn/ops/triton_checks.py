"""What the Triton kernels of :mod:`mmvisattn.ops` accept, checked before any launch.

The kernels load float32, float16 or bfloat16 and compute in float32 (float64 would silently lose
its precision: use ``impl='torch'``). Each op bounds the head width by what its kernels keep in
registers; ``tools/analysis_tools/compile_kernels.py`` compiles the kernels at those widths and
reports registers, spills and shared memory per GPU architecture.
"""
from typing import Sequence

import torch
from torch import Tensor

KERNEL_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def check_kernel_inputs(op: str, tensors: Sequence[Tensor], max_head_dims: int) -> None:
    """One-line ``ValueError`` naming the value when a tensor's dtype or last dimension (the head
    width) is outside what the kernels of ``op`` support."""
    for tensor in tensors:
        if tensor.dtype not in KERNEL_DTYPES:
            names = ', '.join(str(dtype).replace('torch.', '') for dtype in KERNEL_DTYPES)
            raise ValueError(f"{op}(impl='triton'): dtype {str(tensor.dtype).replace('torch.', '')} is not "
                             f"supported; expected one of {names} (impl='torch' takes any floating dtype)")
        if not 1 <= tensor.shape[-1] <= max_head_dims:
            raise ValueError(f"{op}(impl='triton'): head width {tensor.shape[-1]} is outside the supported "
                             f"range 1..{max_head_dims} (impl='torch' takes any width)")
