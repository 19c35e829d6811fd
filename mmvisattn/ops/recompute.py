"""Recomputation by chunks of tokens, shared by the ops and the modules whose per-token
intermediates (ripple's stick weights, feature maps) would otherwise be kept for the backward:
the forward runs without a graph, the backward recomputes one chunk at a time; and :func:`runs`,
the cutting of an axis into steps that every op's memory budget uses."""
from typing import Callable, List, Sequence, Tuple

import torch
from torch import Tensor

from .tracing import apply_function

CHUNK_TOKENS = 4096  # tokens per chunk of the per-token weight computations


def runs(count: int, step: int) -> List[slice]:
    """``range(count)`` cut into consecutive slices of ``step`` (the last one shorter)."""
    return [slice(start, min(start + step, count)) for start in range(0, count, step)]


class ChunkedRecompute(torch.autograd.Function):
    """``fn`` over chunks of tokens (dim -2) that keeps none of ``fn``'s intermediates: the forward runs
    without a graph, the backward recomputes one chunk at a time (``torch.utils.checkpoint`` would do
    the same but pulls in the compiler stack on first use, some 100 MB of modules).

    Autocast: as a checkpoint, the forward runs ``fn`` under the caller's autocast state and the
    backward replays that state, so the recomputed dtypes equal the forward's; ``fn`` itself picks
    float32 where it needs it."""

    @staticmethod
    def forward(ctx, fn: Callable, chunk: int, num_inputs: int, *tensors: Tensor) -> Tuple[Tensor, ...]:
        inputs = tensors[:num_inputs]
        ctx.fn, ctx.chunk, ctx.params = fn, chunk, tensors[num_inputs:]  # parameters: leaves, kept anyway
        device = inputs[0].device.type
        ctx.autocast = (device, torch.get_autocast_dtype(device), torch.is_autocast_enabled(device))
        ctx.save_for_backward(*inputs)
        with torch.no_grad():
            outputs = [fn(*parts) for parts in zip(*(t.split(chunk, dim=-2) for t in inputs))]
        return tuple(torch.cat(parts, dim=-2) for parts in zip(*outputs))

    @staticmethod
    def backward(ctx, *grads: Tensor):
        inputs = ctx.saved_tensors
        grad_params = [torch.zeros_like(p) for p in ctx.params]
        grad_inputs = [[] for _ in inputs]
        grad_chunks = [g.split(ctx.chunk, dim=-2) for g in grads]
        for index, parts in enumerate(zip(*(t.split(ctx.chunk, dim=-2) for t in inputs))):
            parts = [p.detach().requires_grad_(p.is_floating_point()) for p in parts]
            with torch.enable_grad(), torch.autocast(ctx.autocast[0], ctx.autocast[1], enabled=ctx.autocast[2]):
                outputs = ctx.fn(*parts)  # under the forward's autocast state, so dtypes match
            wanted = [p for p in parts if p.requires_grad] + list(ctx.params)
            found = iter(torch.autograd.grad(outputs, wanted, [g[index] for g in grad_chunks], allow_unused=True))
            for part, collected in zip(parts, grad_inputs):
                collected.append(next(found) if part.requires_grad else None)
            for total, grad in zip(grad_params, found):
                if grad is not None:
                    total += grad
        inputs_grads = [torch.cat(g, dim=-2) if g[0] is not None else None for g in grad_inputs]
        return (None, None, None, *inputs_grads, *grad_params)


def checkpointed_chunks(fn: Callable, tensors: Sequence[Tensor], chunk: int, *args, params: Sequence[Tensor] = ()):
    """``fn(*parts, *args)`` over chunks of ``chunk`` tokens (dim -2) of ``tensors``, each chunk
    recomputed in the backward, the outputs (a tensor or a tuple of them) concatenated along dim -2: the
    intermediates of ``fn`` never exist for more than one chunk. ``params`` are the parameters ``fn``
    uses, which receive their gradients."""
    def call(*parts: Tensor) -> Tuple[Tensor, ...]:
        out = fn(*parts, *args)
        return out if isinstance(out, tuple) else (out,)

    outputs = apply_function(ChunkedRecompute, call, chunk, len(tensors), *tensors, *params)
    return outputs if len(outputs) > 1 else outputs[0]
