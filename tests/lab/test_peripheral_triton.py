"""The experimental flash-attention Triton kernels of PerViT's mixing (lab/experimental) against the
explicit Eq. 5, forward and gradients (the shared bias's gradient summed over the images), more keys
than queries, float64 gradcheck. Compiled on a GPU, else under ``TRITON_INTERPRET=1``
(tests/conftest.py)."""
import pytest
import torch

from lab.experimental.peripheral_triton import (
    PeripheralAttentionTriton,
    peripheral_attention_triton,
)
from mmvisattn.ops.peripheral import peripheral_attention_reference

from ..conftest import KERNEL_DEVICE, float64_dot, kernel_tolerance
from ..test_ops.test_peripheral import attention_inputs


@pytest.mark.parametrize('batch,tokens,dims', [(2, 17, 8), (1, 40, 5), (2, 9, 70)])
def test_triton_equals_reference_forward_and_gradients(batch, tokens, dims):
    q, k, v, log_phi_p = (t.detach().float().requires_grad_()
                          for t in attention_inputs(batch, 2, tokens, dims, device=KERNEL_DEVICE))
    fast = peripheral_attention_triton(q, k, v, log_phi_p, 0.4)
    slow = peripheral_attention_reference(q, k, v, log_phi_p, 0.4)
    tolerance = kernel_tolerance(KERNEL_DEVICE)
    torch.testing.assert_close(fast, slow, **tolerance)
    weights = torch.randn_like(fast)
    inputs = (q, k, v, log_phi_p)
    for a, b in zip(torch.autograd.grad((fast * weights).sum(), inputs),
                    torch.autograd.grad((slow * weights).sum(), inputs)):
        torch.testing.assert_close(a, b, **tolerance)


@float64_dot
def test_triton_gradcheck_float64():
    """The flash backward's three kernels in float64 (which only this test passes them, under the
    interpreter on CPU), two images summed into the shared bias's gradient, 40 tokens: two blocks
    with a partial one."""
    inputs = [
        t.detach().requires_grad_() for t in attention_inputs(2, 1, 40, 3, device=KERNEL_DEVICE)
    ]
    assert torch.autograd.gradcheck(lambda *xs: PeripheralAttentionTriton.apply(*xs, 0.4), inputs,
                                    fast_mode=True)


def test_triton_takes_more_keys_than_queries():
    q, k, v, log_phi_p = (
        t.detach().float() for t in attention_inputs(2, 2, 37, 4, device=KERNEL_DEVICE)
    )
    k, v = torch.cat([k, k[:, :, :5]],
                     2).requires_grad_(), torch.cat([v, v[:, :, :5]], 2).requires_grad_()
    log_phi_p = torch.cat([log_phi_p, log_phi_p[..., :5]], -1).requires_grad_()
    q.requires_grad_()
    fast = peripheral_attention_triton(q, k, v, log_phi_p, 0.4)
    slow = peripheral_attention_reference(q, k, v, log_phi_p, 0.4)
    tolerance = kernel_tolerance(KERNEL_DEVICE)
    torch.testing.assert_close(fast, slow, **tolerance)
    for a, b in zip(torch.autograd.grad(fast.sum(), (q, k, v, log_phi_p)),
                    torch.autograd.grad(slow.sum(), (q, k, v, log_phi_p))):
        torch.testing.assert_close(a, b, **tolerance)
