"""How the ops meet mixed precision (``torch.autocast`` in float16 or bfloat16, or a ``.half()``
model): **inputs may be half, arithmetic is float32**, because the sums these ops form (``K^T V``
over all tokens, large logits) leave float16's range and normalisers underflow in it.

* Every hand-written ``torch.autograd.Function`` wraps ``forward`` and ``backward`` in
  :func:`autocast_off`, so the Function alone decides its dtypes.
* Inside, torch code computes on :func:`upcast` copies (float64 stays); Triton kernels load half and
  accumulate in float32. Results come back in the values' dtype, gradients in their inputs'; plain
  functions of the kind use :func:`float32_math`.

:func:`norm_eps` is the one dtype-dependent epsilon; :func:`no_autocast` covers devices without
autocast (``meta``)."""
import contextlib
import functools
from typing import Callable, ContextManager, Tuple

import torch
from torch import Tensor

HALF_DTYPES = (torch.float16, torch.bfloat16)


# devices with autocast in every torch of the range: asking torch only about the others keeps
# torch.compile's graph whole (torch 2.6 cannot trace is_autocast_available)
AUTOCAST_DEVICES = ('cpu', 'cuda')


def has_autocast(device_type: str) -> bool:
    """Whether ``device_type`` has autocast (``meta`` has none)."""
    return device_type in AUTOCAST_DEVICES or torch.amp.is_autocast_available(device_type)


def no_autocast(device_type: str) -> ContextManager:
    """Autocast disabled on ``device_type``; nothing to disable where the device has no autocast."""
    if has_autocast(device_type):
        return torch.autocast(device_type, enabled=False)
    return contextlib.nullcontext()


def autocast_state(device_type: str) -> Tuple[str, torch.dtype, bool]:
    """``(device type, autocast dtype, enabled)`` now, for :func:`restore_autocast`."""
    if has_autocast(device_type):
        return (device_type, torch.get_autocast_dtype(device_type),
                torch.is_autocast_enabled(device_type),)
    return device_type, torch.float32, False


def restore_autocast(state: Tuple[str, torch.dtype, bool]) -> ContextManager:
    """Autocast as :func:`autocast_state` recorded it (a recomputation replays its forward's)."""
    if has_autocast(state[0]):
        return torch.autocast(state[0], state[1], enabled=state[2])
    return contextlib.nullcontext()


def autocast_off(method: Callable) -> Callable:
    """Decorate an autograd Function's ``forward(ctx, ...)`` or ``backward(ctx, ...)``: run it with
    autocast disabled on the device of its first tensor argument."""
    @functools.wraps(method)
    def wrapper(ctx, *args):
        device_type = next(arg.device.type for arg in args if isinstance(arg, Tensor))
        with no_autocast(device_type):
            return method(ctx, *args)
    return wrapper


def float32_math(function: Callable) -> Callable:
    """Decorate a function of tensors: autocast off, half tensor arguments upcast (:func:`upcast`),
    the tensor result cast back to the dtype of the first tensor argument."""
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        first = next(arg for arg in args if isinstance(arg, Tensor))
        with no_autocast(first.device.type):
            result = function(*(upcast(arg)[0] if isinstance(arg, Tensor) else arg for arg in args),
                              **kwargs)
        return result.to(first.dtype)
    return wrapper


def upcast(*tensors: Tensor) -> Tuple[Tensor, ...]:
    """float16 / bfloat16 tensors as float32; every other tensor unchanged."""
    return tuple(t.float() if t.dtype in HALF_DTYPES else t for t in tensors)


def norm_eps(dtype: torch.dtype) -> float:
    """Clamp of ``||x||`` in ``x / max(||x||, eps)`` for ``dtype``: ``1e-12`` (``F.normalize``'s,
    the official code's) where a zero row's gradient ``g / eps`` fits the dtype; for float16 ``1 /
    sqrt(65504)``, so gradients up to 256 through a zero row stay finite.
    """
    return max(1e-12, torch.finfo(dtype).max ** -0.5) if dtype in HALF_DTYPES else 1e-12
