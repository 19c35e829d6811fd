"""What every local/global path of ripple attention shares (arXiv:2110.02453, Eq. 4-6): with the
weights of :func:`~.weights.ring_weights`, every token carries the merged weight ``w_m`` and the
``(2 R_max - 1)^2`` tokens of groups ``r < R_max`` carry ``beta_r`` on top, so::

    num_ij = w_m(i, j) phi(q_ij) sum_all phi(k) v^T
             + sum_{r < R_max} beta_r(i, j) sum_{N_r(i, j)} (phi(q_ij) . phi(k)) v
    den_ij = the same with v = 1

The global part is Eq. 2 (``D x E`` statistics per head); the local part is a pair of passes
(:class:`LocalKernels`) each backend supplies. :class:`RippleLocalGlobal` adds the global sums to a local
part and normalises, with the backward written out.

Mixed precision: autocast off, float32 whatever the inputs' dtype (the global sums run over every token and
leave float16's range), for every local part; the output in ``v``'s dtype.
"""
from typing import Callable, List, NamedTuple, Optional, Sequence, Tuple

import torch
from torch import Tensor

from ..utils.amp import autocast_off, upcast
from ..utils.recompute import runs, step_budget
from ..utils.tracing import apply_function
from .weights import WeightKernels, ring_weights

# Numbers per step of the token-sized (and, in the tiles, score-sized) temporaries: bounds a step's memory
CHUNK_ELEMENTS = 2 ** 17


class LocalKernels(NamedTuple):
    """A local part: ``forward(q, k, v, beta, hw_shape) -> (num, den)`` and
    ``backward(q, k, v, beta, hw_shape, grad_num, grad_den) -> (dq, dk, dv, dbeta)``, and the passes of
    the ring weights that go with it (torch's unless given)."""
    forward: Callable
    backward: Callable
    weights: Optional[WeightKernels] = None


def _flat(*tensors: Tensor) -> Tuple[Tensor, ...]:
    """``(..., N, C)`` tensors as ``(S, N, C)`` and ``(..., N)`` as ``(S, N)``: the layout of the kernels
    (a copy where the input is a permuted view; made in each pass, never kept)."""
    return tuple(t.reshape(-1, *t.shape[-2:]) if t.dim() > 2 else t for t in tensors)


def _slice_groups(q: Tensor, v: Tensor) -> List[slice]:
    """Groups of slices whose token-sized temporaries hold about :data:`CHUNK_ELEMENTS` numbers each on
    CPU (:func:`~mmvisattn.ops.utils.recompute.step_budget` elsewhere)."""
    budget = step_budget(CHUNK_ELEMENTS, q.device)
    return runs(q.shape[0], max(1, budget // (q.shape[1] * max(q.shape[-1], v.shape[-1]))))


def _by_groups(fn: Callable, groups: List[slice], tensors: Sequence[Tensor], *args) -> Tuple[Tensor, ...]:
    """``fn(*tensors, *args)`` over the groups of slices of ``tensors`` (their first axis), the results
    joined by ``cat`` (traced with gradients, this runs as is); one group runs on the tensors as given."""
    if len(groups) == 1:
        return fn(*tensors, *args)
    results = [fn(*(t[part] for t in tensors), *args) for part in groups]
    return tuple(torch.cat(parts) for parts in zip(*results))


class RippleLocalGlobal(torch.autograd.Function):
    """``out = (w_m q (K^T V) + num_local) / (w_m q . sum k + den_local + eps)`` on ``(..., N, .)``
    tensors (``merged_weight`` ``(S, N)``), with the backward written out: only the inputs as given
    (views of the caller's projections), the output and the normaliser are saved (no token-sized
    intermediates of the sum and the division, no copies into the kernels' layout). Both passes
    run over groups of slices, so their token-sized temporaries exist for one group at a time.
    Float32 arithmetic with autocast off."""

    @staticmethod
    @autocast_off
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, beta: Tensor, merged_weight: Tensor, hw_shape: Sequence[int],
                eps: float, kernels: LocalKernels) -> Tensor:
        inputs = (q, k, v, beta, merged_weight)
        flat = (*_flat(*upcast(q, k, v, beta)), upcast(merged_weight)[0])
        out, den = _by_groups(_forward_slices, _slice_groups(flat[0], flat[2]), flat, hw_shape, eps, kernels)
        ctx.save_for_backward(*inputs, out, den)
        ctx.hw_shape, ctx.kernels = hw_shape, kernels
        return out.view(*inputs[2].shape[:-1], -1).to(inputs[2].dtype)

    @staticmethod
    @autocast_off
    def backward(ctx, grad_out: Tensor):
        *inputs, out, den = ctx.saved_tensors
        flat = (*_flat(*upcast(*inputs[:4])), upcast(inputs[4])[0], out, den, _flat(*upcast(grad_out))[0])
        grads = _by_groups(_backward_slices, _slice_groups(flat[0], flat[2]), flat, ctx.hw_shape, ctx.kernels)
        return (*(grad.view(x.shape).to(x.dtype) for grad, x in zip(grads, inputs)), None, None, None)


def _forward_slices(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, merged_weight: Tensor, hw_shape: Sequence[int],
                    eps: float, kernels: LocalKernels) -> Tuple[Tensor, Tensor]:
    """The output and the normaliser of :class:`RippleLocalGlobal` for a group of slices (batched
    products written as such: ``@`` on 3-D tensors adds views around each)."""
    num, den = kernels.forward(q, k, v, beta, hw_shape)
    weighted_q = merged_weight.unsqueeze(-1) * q
    num.baddbmm_(weighted_q, torch.bmm(k.transpose(1, 2), v))
    den.baddbmm_(weighted_q, k.sum(dim=1).unsqueeze(-1)).add_(eps)
    return num.div_(den), den


def _backward_slices(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, merged_weight: Tensor, out: Tensor, den: Tensor,
                     grad_out: Tensor, hw_shape: Sequence[int], kernels: LocalKernels) -> Tuple[Tensor, ...]:
    """Gradients of :class:`RippleLocalGlobal` for a group of slices: ``q, k, v, beta, merged_weight``."""
    grad_num = grad_out / den
    grad_den = -(grad_num * out).sum(dim=-1, keepdim=True)
    key_values, key_sum = torch.bmm(k.transpose(1, 2), v), k.sum(dim=1).unsqueeze(-1)  # (S, D, E), (S, D, 1)
    # what reaches w_m q: grad_num (K^T V)^T + grad_den (sum k)^T
    grad_weighted_q = torch.baddbmm(torch.bmm(grad_num, key_values.transpose(1, 2)), grad_den, key_sum.transpose(1, 2))
    grad_merged = (q * grad_weighted_q).sum(dim=-1)
    weight = merged_weight.unsqueeze(-1)
    weighted_q = (weight * q).transpose(1, 2)
    grad_key_values, grad_key_sum = torch.bmm(weighted_q, grad_num), torch.bmm(weighted_q, grad_den)
    grad_q, grad_k, grad_v, grad_beta = kernels.backward(q, k, v, beta, hw_shape, grad_num, grad_den)
    grad_q.addcmul_(weight, grad_weighted_q)
    grad_k.baddbmm_(v, grad_key_values.transpose(1, 2)).add_(grad_key_sum.transpose(1, 2))
    grad_v.baddbmm_(k, grad_key_values)
    return grad_q, grad_k, grad_v, grad_beta, grad_merged


def local_plus_global(q: Tensor, k: Tensor, v: Tensor, logits: Tensor, hw_shape: Sequence[int], tau: float,
                      eps: float, kernels: LocalKernels) -> Tensor:
    """Ripple attention from a local part (``kernels``) and the global sums weighted by ``w_m``."""
    tokens = q.shape[-2]
    beta, merged_weight = ring_weights(logits, hw_shape, tau, kernels.weights)
    return apply_function(RippleLocalGlobal, q, k, v, beta, merged_weight.reshape(-1, tokens), tuple(hw_shape), eps,
                          kernels)

