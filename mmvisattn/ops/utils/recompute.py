"""Recomputation by chunks of tokens, shared by the ops and the modules whose per-token
intermediates (ripple's stick weights, feature maps) would otherwise be kept for the backward:
the forward runs without a graph, the backward recomputes one chunk at a time; :func:`runs`, the
cutting of an axis into steps that every op's memory budget uses, and :func:`step_budget`, the
budget by device."""
from typing import Callable, List, Sequence, Tuple

import torch
from torch import Tensor

from .amp import autocast_state, restore_autocast
from .tracing import apply_function

CHUNK_TOKENS = 4096  # tokens per chunk of the per-token weight computations
# Elements one step's temporaries may hold off the CPU (128 MB of float32). The ops' budgets are
# tuned for a CPU's cache, where more and smaller steps cost little; on a GPU each step costs its
# launches (tens of aten calls, 5-10 us each), so there the shipped sizes run in one step.
DEVICE_BUDGET = 1 << 25
CACHE_BUDGETED = ('cpu',)  # device types whose steps the ops' CPU budgets size


def step_budget(cpu_budget: int, device: torch.device, item_elements: int = 1) -> int:
    """Items (elements, or rows of ``item_elements``) per step: ``cpu_budget`` on the devices of
    :data:`CACHE_BUDGETED`, elsewhere as many as :data:`DEVICE_BUDGET` elements hold (at least
    ``cpu_budget``)."""
    if device.type in CACHE_BUDGETED:
        return cpu_budget
    return max(cpu_budget, DEVICE_BUDGET // item_elements)


def runs(count: int, step: int) -> List[slice]:
    """``range(count)`` cut into consecutive slices of ``step`` (the last one shorter)."""
    return [slice(start, min(start + step, count)) for start in range(0, count, step)]


class ChunkedRecompute(torch.autograd.Function):
    """``fn(span, *parts)`` over the ``spans`` of the token axis (dim -2), ``parts`` the spans of
    the chunked inputs, keeping none of ``fn``'s intermediates: the forward runs without a graph,
    the backward recomputes one span at a time (``torch.utils.checkpoint`` would do the same but
    pulls in the compiler stack on first use, some 100 MB of modules). The span is a ``slice`` known
    to the host, so ``fn`` can cut its own tensors by it without reading a position back from the
    device.

    Autocast: as a checkpoint, the forward runs ``fn`` under the caller's autocast state and the
    backward replays that state, so the recomputed dtypes equal the forward's; ``fn`` itself picks
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
    """``fn(span, *parts, *args)`` over the spans of ``chunk`` positions of a token axis of
    ``length`` (dim -2), ``parts`` those spans of ``tensors``, each span recomputed in the backward,
    the outputs (a tensor or a tuple of them, ``span``-long along dim -2) concatenated: the
    intermediates of ``fn`` never exist for more than one span. ``params`` are the other tensors
    ``fn`` uses (parameters, or whole tensors shared by the spans), which receive their
    gradients."""
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
