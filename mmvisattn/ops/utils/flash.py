"""What the flash-attention kernels share ("FlashAttention-2", arXiv:2307.08691, Alg. 1 and 2): the
forward's online softmax, and the probabilities and score gradients the backward recomputes from the
row log-sum-exp. Products take the inputs' precision (``DOT``) and accumulate in float32 (``ACC``);
float64 inputs (the interpreter's gradchecks) stay float64.
"""
import torch
import triton
import triton.language as tl

from .triton_launch import dot_operands


def precision(dtype: torch.dtype) -> dict:
    """``DOT`` and ``ACC``, the compile-time product and accumulator dtypes for ``dtype`` inputs."""
    if dtype == torch.float64:
        return dict(DOT=tl.float64, ACC=tl.float64)
    return dict(DOT=dot_operands(dtype), ACC=tl.float32)


@triton.jit
def online_softmax(scores, values, row_max, row_sum, acc, DOT: tl.constexpr, ACC: tl.constexpr):
    """One key block folded into the running maximum, sum and weighted values of each query row
    (``-inf`` scores are masked keys; a row with none seen yet keeps a zero sum)."""
    new_max = tl.maximum(row_max, tl.max(scores, axis=1))
    shift = tl.where(new_max == float('-inf'), 0.0, new_max)
    probs = tl.exp(scores - shift[:, None])
    rescale = tl.exp(row_max - shift)
    acc = acc * rescale[:, None] + tl.dot(probs.to(DOT), values, out_dtype=ACC)
    return new_max, row_sum * rescale + tl.sum(probs, axis=1), acc


@triton.jit
def log_sum_exp(row_max, row_sum):
    """Each row's log-sum-exp and the sum to divide by (1 where a row saw no key)."""
    safe_sum = tl.where(row_sum > 0, row_sum, 1.0)
    return row_max + tl.log(safe_sum), safe_sum


@triton.jit
def score_grads(scores, values, grad_out, lse, delta, ACC: tl.constexpr):
    """Probabilities and score gradients of one block, ``dS = P * (dO V^T - delta)`` with
    ``delta = sum_j p_ij dp_ij`` per row, from the forward's log-sum-exp."""
    probs = tl.exp(scores - lse[:, None])
    return probs, probs * (tl.dot(grad_out, tl.trans(values), out_dtype=ACC) - delta[:, None])
