"""Hand-written ``autograd.Function`` s under tracing: ``torch.jit.trace`` (behind ONNX export and
mmengine's FLOP counter) cannot record one, so while tracing :func:`apply_function` runs its
``forward`` as plain ops with a context that keeps nothing. (Sliding-chunk and RWGK have their own
traced forms.)
"""
from contextlib import nullcontext
from typing import Any, ContextManager, Type

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


class _TracingPaused:
    """:func:`onnx_constants` under ONNX export: the tracer's state set aside, then restored."""

    def __enter__(self) -> None:
        self.state = torch._C._get_tracing_state()
        torch._C._set_tracing_state(None)

    def __exit__(self, *exc_info: Any) -> None:
        torch._C._set_tracing_state(self.state)


def onnx_constants() -> ContextManager:
    """Under ONNX export, tracing paused: what is computed inside enters the graph as constants
    (tensors of the weights and map size alone, e.g. PerViT's position attention). Elsewhere a
    ``nullcontext``."""
    return _TracingPaused() if torch.onnx.is_in_onnx_export() else nullcontext()
