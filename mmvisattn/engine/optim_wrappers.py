"""Mixed-precision training on CPU.

mmengine 0.10.7's ``AmpOptimWrapper`` requires an accelerator, so ``--amp`` has no stock CPU path.
:class:`CPUAmpOptimWrapper` runs ``optim_context`` under ``torch.autocast('cpu', bfloat16)``;
bfloat16 has float32's range, so no loss scaling is needed.
"""
from contextlib import contextmanager

import torch
import torch.nn as nn
from mmengine.optim import OptimWrapper
from mmengine.registry import OPTIM_WRAPPERS

CPU_AMP_DTYPES = ('bfloat16', 'float16')


@OPTIM_WRAPPERS.register_module()
class CPUAmpOptimWrapper(OptimWrapper):
    """``OptimWrapper`` whose training forward runs under CPU autocast.

    Args:
        dtype: ``'bfloat16'`` (default; no loss scaling needed) or ``'float16'`` (for checking a
            model's float16 path on CPU; without a loss scaler, small gradients may underflow).
        **kwargs: Arguments of ``OptimWrapper`` (``optimizer``, ``clip_grad``, ...).
    """

    def __init__(self, dtype: str = 'bfloat16', **kwargs) -> None:
        if dtype not in CPU_AMP_DTYPES:
            raise ValueError(f'CPUAmpOptimWrapper: dtype={dtype!r}; expected one of '
                             f'{CPU_AMP_DTYPES}')
        super().__init__(**kwargs)
        self.cast_dtype = getattr(torch, dtype)

    @contextmanager
    def optim_context(self, model: nn.Module):
        with super().optim_context(model), torch.autocast('cpu', dtype=self.cast_dtype):
            yield
