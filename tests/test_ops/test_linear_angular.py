"""Linear-angular op: the torch and Triton forms equal the explicit N x N angular kernel, in value
and gradient, for odd sizes and batch > 1, on every device of the suite; the kernel is positive and
its rows normalise. The Triton kernels run compiled on a GPU, else on CPU under TRITON_INTERPRET=1
(set by `make test` and tests/conftest.py)."""
import math

import pytest
import torch

from mmvisattn.ops.linear_angular import (
    linear_angular_attention,
    linear_angular_attention_reference,
)
from mmvisattn.ops.linear_angular.reference import angular_kernel_reference

from ..conftest import KERNEL_DEVICE, kernel_tolerance


def inputs(batch=2, heads=3, tokens=17, dims=8, value_dims=8, device='cpu'):
    torch.manual_seed(tokens)
    shapes = [(batch, heads, tokens, dims)] * 2 + [(batch, heads, tokens, value_dims)]
    return [torch.randn(*shape, dtype=torch.float64, device=device,
                        requires_grad=True) for shape in shapes]


SIZES = [(17, 8, 8), (1, 4, 4), (64, 16, 5), (9, 3, 12), (130, 32, 33)]


@pytest.mark.parametrize('tokens,dims,value_dims', SIZES)
def test_linear_form_equals_explicit_kernel(tokens, dims, value_dims, device):
    q, k, v = inputs(tokens=tokens, dims=dims, value_dims=value_dims, device=device)
    torch.testing.assert_close(linear_angular_attention(q, k, v, impl='torch'),
                               linear_angular_attention_reference(q, k, v))


def test_gradients_equal_explicit_kernel(device):
    q, k, v = inputs(device=device)
    weights = torch.randn(2, 3, 17, 8, dtype=torch.float64, device=device)
    fast = torch.autograd.grad((linear_angular_attention(q, k, v, impl='torch') * weights).sum(),
                               (q, k, v))
    slow = torch.autograd.grad((linear_angular_attention_reference(q, k, v) * weights).sum(),
                               (q, k, v))
    for a, b in zip(fast, slow):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize('tokens,dims,value_dims', SIZES)
def test_triton_equals_reference_forward_and_gradients(tokens, dims, value_dims):
    q, k, v = (t.detach().float().requires_grad_()
               for t in inputs(tokens=tokens, dims=dims, value_dims=value_dims,
                               device=KERNEL_DEVICE))
    weights = torch.randn(*v.shape[:-2], tokens, value_dims, device=KERNEL_DEVICE)
    fast = linear_angular_attention(q, k, v, impl='triton')
    slow = linear_angular_attention_reference(q, k, v)
    tolerance = kernel_tolerance(KERNEL_DEVICE)
    torch.testing.assert_close(fast, slow, **tolerance)
    fast_grads = torch.autograd.grad((fast * weights).sum(), (q, k, v))
    slow_grads = torch.autograd.grad((slow * weights).sum(), (q, k, v))
    for a, b in zip(fast_grads, slow_grads):
        torch.testing.assert_close(a, b, **tolerance)


def test_triton_keeps_half_precision_dtype():
    q, k, v = (
        t.detach().to(torch.bfloat16)
        for t in inputs(tokens=40, dims=16, value_dims=16, device=KERNEL_DEVICE)
    )
    out = linear_angular_attention(q, k, v, impl='triton')
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(),
                               linear_angular_attention_reference(q.float(), k.float(), v.float()),
                               **kernel_tolerance(KERNEL_DEVICE, torch.bfloat16))


def test_auto_picks_torch_on_cpu_and_unknown_impl_is_named():
    q, k, v = inputs(tokens=6)
    torch.testing.assert_close(linear_angular_attention(q, k, v),
                               linear_angular_attention(q, k, v, impl='torch'))
    with pytest.raises(ValueError, match="impl='cuda'; expected one of"):
        linear_angular_attention(q, k, v, impl='cuda')


@pytest.mark.parametrize('batch,tokens,dims,value_dims', [(1, 5, 3, 2), (2, 7, 4, 5)])
def test_hand_written_backward_passes_gradcheck(batch, tokens, dims, value_dims, device):
    assert torch.autograd.gradcheck(lambda *a: linear_angular_attention(*a, impl='torch'),
                                    inputs(batch=batch, heads=2, tokens=tokens, dims=dims,
                                           value_dims=value_dims, device=device))


def test_backward_saves_only_the_inputs():
    q, k, v = (t.detach().float().requires_grad_() for t in inputs(tokens=64))
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        linear_angular_attention(q, k, v, impl='torch')
    assert [t.data_ptr() for t in saved] == [q.data_ptr(), k.data_ptr(), v.data_ptr()]


def test_kernel_bounds_and_row_normalisation():
    q, k, v = inputs()
    kernel = angular_kernel_reference(q, k)
    assert kernel.min() >= 0.5 - 1 / math.pi - 1e-12 and kernel.max() <= 0.5 + 1 / math.pi + 1e-12
    constant = torch.full_like(v, 3.0)
    torch.testing.assert_close(linear_angular_attention(q, k, constant), constant)


def test_saved_memory_is_linear_in_tokens():
    def saved_elements(tokens):
        q, k, v = (t.detach().float().requires_grad_() for t in inputs(tokens=tokens))
        sizes = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: sizes.append(t.numel()) or t,
                                                      lambda t: t):
            linear_angular_attention(q, k, v)
        return sum(sizes)
    assert saved_elements(1024) < 4.5 * saved_elements(256)
