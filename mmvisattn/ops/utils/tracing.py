"""Hand-written ``autograd.Function`` s under tracing.

``torch.jit.trace`` (behind ``torch.onnx.export`` and mmengine's FLOP counter, which mmdet's and
mmseg's ``get_flops.py`` call) cannot record a Python ``autograd.Function``. Traced inference needs
none of the backward, so while tracing :func:`apply_function` runs the Function's own ``forward``
as plain ops, with a context that keeps nothing: the same arithmetic, one copy of it. (The
sliding-chunk and RWGK ops have their own traced forms, whole-tensor formulas: their Functions
write slice by slice into preallocated outputs.)
"""
from typing import Any, Type

import torch


class _NoBackward:
    """The ``ctx`` of a forward whose backward will never run: attributes are accepted, and
    tensors saved for the backward are dropped."""

    def save_for_backward(self, *tensors: Any) -> None:
        pass

    def mark_non_differentiable(self, *tensors: Any) -> None:
        pass

    def set_materialize_grads(self, value: bool) -> None:
        pass


def apply_function(function: Type[torch.autograd.Function], *args: Any) -> Any:
    """``function.apply(*args)``, or, while tracing, ``function.forward`` as plain ops."""
    if torch.jit.is_tracing():
        return function.forward(_NoBackward(), *args)
    return function.apply(*args)
