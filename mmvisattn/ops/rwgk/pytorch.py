"""RWGK attention in linear time: Algorithm 1 / Eq. (8) with a linear solve (``impl='torch'``). The
Function saves the inputs, the ``M x M`` system and its solution, never the ``N x M`` graphs
(recomputed), in slices of images and heads on CPU.

Mixed precision: autocast off, float32 arithmetic (``I - lam G_K G_Q`` in half loses the digits that
keep it invertible); the output in ``q``'s dtype, gradients in their inputs'."""
from types import EllipsisType
from typing import Callable, Iterator, Optional, Tuple, Union

import torch
from torch import Tensor

from ..utils.amp import autocast_off, float32_math, upcast
from ..utils.recompute import runs, step_budget
from .common import bipartite_graphs, check_lam

GRAPH_BUDGET = 1 << 19  # elements of one slice's N x M graph on CPU: bounds the transient memory


def _softmax_backward(probs: Tensor, grad: Tensor) -> Tensor:
    """Gradient of the logits of ``probs = softmax(logits, dim=-1)``, written into ``grad``."""
    row = (grad * probs).sum(dim=-1, keepdim=True)
    return grad.sub_(row).mul_(probs)


Index = Union[EllipsisType, Tuple[int, slice]]


def _slices(q: Tensor, anchor: Tensor) -> Iterator[Tuple[Index, Index]]:
    """Indices ``(images and heads, anchor images and heads)`` of slices whose graphs fit the
    device's budget (:data:`GRAPH_BUDGET`): ``...`` for the whole batch where it fits, else an image
    and a run of heads at a time; anchor image 0 where one set serves all."""
    batch, heads, tokens = q.shape[:3]
    budget = step_budget(GRAPH_BUDGET, q.device)
    if batch * heads * tokens * anchor.shape[-2] <= budget:
        yield ..., ...
        return
    for image in range(batch):
        for part in runs(heads, max(1, budget // max(1, tokens * anchor.shape[-2]))):
            yield (image, part), (0 if anchor.shape[0] == 1 else image, part)


def solve(system: Tensor, rhs: Tensor) -> Tensor:
    """``system^-1 rhs`` without ``torch.linalg.solve``'s error check, which reads the status back
    from the device every layer: the systems are strictly diagonally dominant, never singular.
    Traced (ONNX, FLOP counter): ``torch.linalg.solve``."""
    if torch.jit.is_tracing():
        return torch.linalg.solve(system, rhs)
    return torch.linalg.solve_ex(system, rhs, check_errors=False)[0]


def neumann_factors(lam: float, tolerance: float = 2.0 ** -24) -> int:
    """Factors of :func:`neumann_solve` for ``lam``: after ``f`` the remainder is at most
    ``lam^(2^f) / (1 - lam)``, below ``tolerance`` (5 factors at ``lam = 0.5``)."""
    factors, remainder = 0, lam
    while remainder / (1.0 - lam) > tolerance:
        remainder, factors = remainder * remainder, factors + 1
    return factors


def neumann_solve(system: Tensor, rhs: Tensor, lam: float) -> Tensor:
    """``(I - W)^-1 rhs``, ``W = lam G_K G_Q``, by the Neumann product ``prod_j (I + W^(2^j))`` in
    matrix products only: the solve for deploy backends without one (TensorRT, OpenVINO, ncnn)."""
    walk = torch.eye(system.shape[-1], dtype=system.dtype, device=system.device) - system
    out = rhs
    for _ in range(neumann_factors(lam)):
        out = out + walk @ out
        walk = walk @ walk
    return out


def random_walk(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    anchor_q: Tensor,
    anchor_k: Tensor,
    lam: float,
    solver: Callable[[Tensor, Tensor], Tensor] = solve,
) -> Tuple[Tensor, Tensor, Tensor]:
    """Eq. (8) on whole tensors: the output, the system ``I - lam G_K G_Q`` and its solution
    ``(I - lam G_K G_Q)^-1 G_K V`` (by ``solver``)."""
    graph_q, graph_k = bipartite_graphs(q, k, anchor_q, anchor_k)
    eye = torch.eye(graph_k.shape[-2], dtype=q.dtype, device=q.device)
    system = eye - lam * (graph_k @ graph_q)  # strictly diagonally dominant, so always solvable
    walked = solver(system, graph_k @ v)
    return (1.0 - lam) * (graph_q @ walked), system, walked


class RandomWalkAttention(torch.autograd.Function):
    """``(1 - lam) G_Q (I - lam G_K G_Q)^-1 (G_K V)`` (Eq. 8) with the graphs of Eq. (6), computed
    in slices of images and heads so that the ``N x M`` graphs exist for one slice at a time."""

    @staticmethod
    @autocast_off
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, anchor_q: Tensor, anchor_k: Tensor,
                lam: float) -> Tensor:
        inputs = (q, k, v, anchor_q, anchor_k)
        q, k, v, anchor_q, anchor_k = upcast(*inputs)
        anchors = anchor_q.shape[-2]
        out = q.new_empty(q.shape)
        system = q.new_empty(*q.shape[:2], anchors, anchors)
        walked = q.new_empty(*q.shape[:2], anchors, v.shape[-1])
        for part, anchors_part in _slices(q, anchor_q):
            out[part], system[part], walked[part] = random_walk(
                q[part], k[part], v[part], anchor_q[anchors_part], anchor_k[anchors_part], lam)
        ctx.save_for_backward(*inputs, system, walked)
        ctx.lam = lam
        return out.to(inputs[0].dtype)

    @staticmethod
    @autocast_off
    def backward(ctx, grad_out: Tensor) -> Tuple[Optional[Tensor], ...]:
        *inputs, system, walked = ctx.saved_tensors
        q, k, v, anchor_q, anchor_k, grad_out = upcast(*inputs, grad_out)
        grad_q, grad_k, grad_v = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        grad_anchor_q, grad_anchor_k = torch.zeros_like(anchor_q), torch.zeros_like(anchor_k)
        for part, anchors_part in _slices(q, anchor_q):
            grads = _backward_slice(q[part], k[part], v[part], anchor_q[anchors_part],
                                    anchor_k[anchors_part],
                                    system[part], walked[part], grad_out[part], ctx.lam)
            grad_q[part], grad_k[part], grad_v[part] = grads[:3]
            # summed over the images that share one set of anchors
            grad_anchor_q[anchors_part] += grads[3].sum_to_size(grad_anchor_q[anchors_part].shape)
            grad_anchor_k[anchors_part] += grads[4].sum_to_size(grad_anchor_k[anchors_part].shape)
        grads = (grad_q, grad_k, grad_v, grad_anchor_q, grad_anchor_k)
        return (*(grad.to(x.dtype) for grad, x in zip(grads, inputs)), None)


def _backward_slice(q: Tensor, k: Tensor, v: Tensor, anchor_q: Tensor, anchor_k: Tensor,
                    system: Tensor,
                    walked: Tensor, grad_out: Tensor, lam: float) -> Tuple[Tensor, ...]:
    """Gradients of one slice for ``q, k, v, anchor_q, anchor_k``; the graphs are recomputed."""
    graph_q, graph_k = bipartite_graphs(q, k, anchor_q, anchor_k)
    grad_out = (1.0 - lam) * grad_out
    grad_graph_q = grad_out @ walked.transpose(-1, -2)  # (h, N, M)
    # walked = S^-1 A with S = I - lam G_K G_Q and A = G_K V: dA = S^-T dW, dS = -dA W^T
    grad_anchor_values = solve(system.transpose(-1, -2), graph_q.transpose(-1, -2) @ grad_out)
    grad_product = lam * (grad_anchor_values @ walked.transpose(-1, -2))  # of G_K G_Q, (h, M, M)
    # matmul, not baddbmm: slices may be 4-D
    grad_graph_q += graph_k.transpose(-1, -2) @ grad_product
    grad_graph_k = grad_anchor_values @ v.transpose(-1,
                                                    -2) + grad_product @ graph_q.transpose(-1, -2)
    grad_v = graph_k.transpose(-1, -2) @ grad_anchor_values
    scale = q.shape[-1] ** -0.5
    grad_logits_q = _softmax_backward(graph_q, grad_graph_q).mul_(scale)
    grad_logits_k = _softmax_backward(graph_k, grad_graph_k).mul_(scale)
    return (grad_logits_q @ anchor_k, grad_logits_k.transpose(-1, -2) @ anchor_q, grad_v,
            grad_logits_k @ k, grad_logits_q.transpose(-1, -2) @ q)


def rwgk_attention_torch(q: Tensor, k: Tensor, v: Tensor, anchor_q: Tensor, anchor_k: Tensor,
                         lam: float = 0.5) -> Tensor:
    """Algorithm 1 / Eq. (8): ``(1 - lam) (G_Q (I - lam G_K G_Q)^-1) (G_K V)`` in linear time.

    Args:
        q, k, v: ``(B, heads, N, d)``.
        anchor_q, anchor_k: ``(B or 1, heads, M, d)``.
        lam: Decay of longer random walks, in (0, 1).

    Returns:
        ``(B, heads, N, d)`` in the dtype of ``q``.
    """
    check_lam(lam)
    # whole tensors: the Function writes slices into preallocated outputs
    if torch.jit.is_tracing():
        return float32_math(lambda *tensors: random_walk(*tensors, lam)[0])(
            q, k, v, anchor_q, anchor_k
        )
    return RandomWalkAttention.apply(q, k, v, anchor_q, anchor_k, float(lam))
