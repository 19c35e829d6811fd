"""The experimental Triton kernels of Castling's masked softmax (flash-attention style,
lab/experimental) against the literal form: several query and key blocks with partial ones, more
keys than queries and fewer, a 70-wide head, batch and heads > 1, half inputs, float64 gradcheck.
Compiled on a GPU, else under ``TRITON_INTERPRET=1`` (tests/conftest.py)."""
import pytest
import torch

from lab.experimental.masked_softmax_triton import (
    MaskedSoftmaxTriton,
    masked_softmax_attention_triton,
)
from mmvisattn.ops.masked_softmax import masked_softmax_attention_reference

from ..conftest import KERNEL_DEVICE, float64_dot, kernel_tolerance
from ..test_ops.test_masked_softmax import qkv


@pytest.mark.parametrize('queries,keys,dims', [(70, 70, 8), (9, 100, 5), (100, 9, 70)])
def test_triton_equals_the_literal_form_in_value_and_gradients(queries, keys, dims):
    """70 queries: two blocks of 64, the last partial; 100 keys: four blocks of 32, the last
    partial."""
    torch.manual_seed(queries + keys)
    q = torch.randn(2, 3, queries, dims, device=KERNEL_DEVICE, requires_grad=True)
    k, v = (torch.randn(2, 3, keys, dims, device=KERNEL_DEVICE,
                        requires_grad=True) for _ in range(2))
    fast = masked_softmax_attention_triton(q, k, v, 0.02)
    literal = masked_softmax_attention_reference(q, k, v, 0.02)
    weights = torch.softmax(q @ k.transpose(-1, -2) * dims ** -0.5, -1)
    assert (weights <= 0.02).any() and (weights > 0.02).any()  # the mask drops some, keeps some
    tolerance = kernel_tolerance(KERNEL_DEVICE)
    torch.testing.assert_close(fast, literal, **tolerance)
    upstream = torch.randn_like(literal)
    for a, b in zip(torch.autograd.grad(fast, (q, k, v), upstream),
                    torch.autograd.grad(literal, (q, k, v), upstream)):
        torch.testing.assert_close(a, b, **tolerance)


@float64_dot
def test_triton_gradcheck_in_float64():
    """Both backward kernels in float64 (only this test passes them float64, under the interpreter
    on CPU): 70 queries and 40 keys, each over a partial block, no weight within 5e-5 of the
    threshold (the finite differences move the weights by about 1e-6)."""
    torch.manual_seed(8)
    q, k, v = (torch.randn(1, 2, n, 3, dtype=torch.float64,
                           device=KERNEL_DEVICE) for n in (70, 40, 40))
    weights = torch.softmax(q @ k.transpose(-1, -2), -1)
    assert (weights
            - 0.03).abs().min() > 5e-5 and (weights <= 0.03).any() and (weights > 0.03).any()
    inputs = [t.requires_grad_() for t in (q, k, v)]
    assert torch.autograd.gradcheck(lambda *xs: MaskedSoftmaxTriton.apply(*xs, 1.0, 0.03), inputs,
                                    fast_mode=True)


@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16])
def test_half_inputs_give_finite_float32_softmax_results(dtype):
    """Logits beyond float16's range before the scale: output and gradients finite in the inputs'
    dtype, within the rounding of half weights of the float32 result."""
    q, k, v = (t.detach().to(dtype).to(KERNEL_DEVICE).requires_grad_()
               for t in qkv(40, 40, dtype=torch.float32, scale=100.0))
    out = masked_softmax_attention_triton(q, k, v, 0.02)
    literal = masked_softmax_attention_reference(*(t.detach().float().cpu() for t in (q, k, v)),
                                                 0.02)
    assert out.dtype == dtype and torch.isfinite(out).all()
    assert (out.float().cpu() - literal).abs().max() <= 1e-2 * literal.abs().max()
    grads = torch.autograd.grad(out.float().sum(), (q, k, v))
    assert all(grad.dtype == dtype and torch.isfinite(grad).all() for grad in grads)
