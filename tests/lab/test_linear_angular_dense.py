"""The experimental one-program dense form of linear-angular attention (lab/experimental: the
``N x N`` kernel tile by tile in Triton) against the explicit kernel: whole and partial blocks,
heads 3 to 70 wide, half precision, float64 gradcheck. Compiled on a GPU, else under
``TRITON_INTERPRET=1`` (tests/conftest.py)."""
import pytest
import torch

from lab.experimental.linear_angular_dense import DenseAngular, linear_angular_attention_dense
from mmvisattn.ops.linear_angular import linear_angular_attention_reference

from ..conftest import KERNEL_DEVICE, float64_dot, kernel_tolerance
from ..test_ops.test_linear_angular import SIZES, inputs


@pytest.mark.parametrize('tokens,dims,value_dims', SIZES + [(40, 70, 66)])
def test_dense_form_equals_explicit_kernel(tokens, dims, value_dims):
    """The kernels over whole and partial blocks (130 tokens: three blocks of 64 queries and five of
    32 keys), heads 3 to 33 wide and 70 (the wide launches' smaller blocks), in value and
    gradient."""
    q, k, v = (t.detach().float().requires_grad_()
               for t in inputs(tokens=tokens, dims=dims, value_dims=value_dims,
                               device=KERNEL_DEVICE))
    fast, slow = linear_angular_attention_dense(q, k,
                                                v), linear_angular_attention_reference(q, k, v)
    tolerance = kernel_tolerance(KERNEL_DEVICE)
    torch.testing.assert_close(fast, slow, **tolerance)
    weights = torch.randn_like(slow)
    for a, b in zip(torch.autograd.grad((fast * weights).sum(), (q, k, v)),
                    torch.autograd.grad((slow * weights).sum(), (q, k, v))):
        torch.testing.assert_close(a, b, **tolerance)


@float64_dot
def test_dense_gradcheck_in_float64():
    """The kernel in float64 (only this test passes it float64, under the interpreter on CPU) with
    the backward's products: more queries than keys, each over a partial block."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 1, n, 3, dtype=torch.float64, device=KERNEL_DEVICE,
                           requires_grad=True)
               for n in (70, 40, 40))
    assert torch.autograd.gradcheck(DenseAngular.apply, (q, k, v), fast_mode=True)


@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16])
def test_dense_form_in_half_precision(dtype):
    """Half products (tensor cores on a GPU) within the dtype's bound of the float64 kernel; a zero
    query row (the float16 norm clamp) stays finite in value and gradient."""
    q, k, v = (t.detach().to(dtype) for t in inputs(tokens=64, dims=16, value_dims=16,
                                                    device=KERNEL_DEVICE))
    q[0, 0, 0] = 0
    q.requires_grad_()
    out = linear_angular_attention_dense(q, k, v)
    assert out.dtype == dtype
    torch.testing.assert_close(
        out.double(),
        linear_angular_attention_reference(q.double(), k.double(), v.double()),
        atol=2e-2,
        rtol=2e-2,
    )
    grad = torch.autograd.grad(out.float().sum(), q)[0]
    assert grad.dtype == dtype and torch.isfinite(grad).all()
