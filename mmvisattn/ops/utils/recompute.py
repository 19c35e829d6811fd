"""Recomputation by chunks of tokens: the forward without a graph, the backward one chunk at a time,
for ops and modules whose per-token intermediates would otherwise be kept; :func:`runs` cuts an axis
into steps and :func:`step_budget` sizes them by device."""
from typing import Callable, List, Sequence, Tuple

import torch
from torch import Tensor

from .amp import autocast_state, restore_autocast
from .tracing import apply_function

CHUNK_TOKENS = 4096  # tokens per chunk of the per-token weight computations
# elements one step's temporaries may hold off the CPU (128 MB of float32): budgets are tuned for a
# CPU's cache; on a GPU each step costs its launches, so shipped sizes run in one step
DEVICE_BUDGET = 1 << 25
CACHE_BUDGETED = ('cpu',)  # device types whose steps the ops' CPU budgets size


def step_budget(cpu_budget: int, device: torch.device, item_elements: int = 1) -> int:
    """Items per step: ``cpu_budget`` on :data:`CACHE_BUDGETED` devices, elsewhere what
    :data:`DEVICE_BUDGET` elements hold (at least ``cpu_budget``)."""
    if device.type in CACHE_BUDGETED:
        return cpu_budget
    return max(cpu_budget, DEVICE_BUDGET // item_elements)


def runs(count: int, step: int) -> List[slice]:
    """``range(count)`` cut into consecutive slices of ``step`` (the last one shorter)."""
    return [slice(start, min(start + step, count)) for start in range(0, count, step)]


class ChunkedRecompute(torch.autograd.Function):
    """``fn(span, *parts)`` over ``spans`` of the token axis (dim -2), keeping none of ``fn``'s
    intermediates: no graph forward, each span recomputed backward (as ``torch.utils.checkpoint``,
    without importing the compiler stack). Spans are host ``slice`` s, so nothing is read back.

    Autocast: as a checkpoint, the backward replays the forward's autocast state; ``fn`` picks
    float32 where it needs it."""

    @staticmethod
    def forward(ctx, fn: Callable, spans: Sequence[slice], num_inputs: int,
                *tensors: Tensor) -> Tuple[Tensor, ...]:
        inputs = tensors[:num_inputs]
        # parameters: leaves, kept anyway
        ctx.fn, ctx.spans, ctx.params = fn, spans, tensors[num_inputs:]
        ctx.autocast = autocast_state(tensors[0].device.type)
        ctx.save_for_backward(*inputs)
        with torch.no_grad():
            return _by_spans(fn, spans, inputs)

    @staticmethod
    def backward(ctx, *grads: Tensor):
        inputs = ctx.saved_tensors
        grad_params = [torch.zeros_like(p) for p in ctx.params]
        grad_inputs = [[] for _ in inputs]
        for span in ctx.spans:
            parts = [t[..., span, :].detach().requires_grad_(t.is_floating_point()) for t in inputs]
            with torch.enable_grad(), restore_autocast(ctx.autocast):
                # under the forward's autocast state, so dtypes match
                outputs = ctx.fn(span, *parts)
            wanted = [p for p in parts if p.requires_grad] + list(ctx.params)
            found = iter(torch.autograd.grad(outputs, wanted, [g[..., span, :] for g in grads],
                                             allow_unused=True))
            for part, collected in zip(parts, grad_inputs):
                collected.append(next(found) if part.requires_grad else None)
            for total, grad in zip(grad_params, found):
                if grad is not None:
                    total += grad
        inputs_grads = [torch.cat(g, dim=-2) if g[0] is not None else None for g in grad_inputs]
        return (None, None, None, *inputs_grads, *grad_params)


def checkpointed_chunks(fn: Callable, length: int, chunk: int, tensors: Sequence[Tensor] = (),
                        *args, params: Sequence[Tensor] = ()):
    """``fn(span, *parts, *args)`` over spans of ``chunk`` positions of a ``length``-long token
    axis, each recomputed in the backward, outputs concatenated along dim -2; ``params``
    (parameters, shared tensors) receive their gradients."""
    def call(span: slice, *parts: Tensor) -> Tuple[Tensor, ...]:
        out = fn(span, *parts, *args)
        return out if isinstance(out, tuple) else (out,)

    if any(t.requires_grad for t in (*tensors, *params)):
        outputs = apply_function(ChunkedRecompute, call, runs(length, chunk), len(tensors),
                                 *tensors, *params)
    # no gradient wanted (frozen weights): no graph to spare, and nothing for the Function to run on
    else:
        outputs = _by_spans(call, runs(length, chunk), tensors)
    return outputs if len(outputs) > 1 else outputs[0]


def _by_spans(fn: Callable, spans: Sequence[slice], inputs: Sequence[Tensor]) -> Tuple[Tensor, ...]:
    """``fn`` over ``spans`` of the ``inputs`` (dim -2), its outputs concatenated."""
    outputs = [fn(span, *(t[..., span, :] for t in inputs)) for span in spans]
    return tuple(torch.cat(parts, dim=-2) for parts in zip(*outputs))
