"""The experimental forms of ripple attention (lab/experimental) against the reference in value and
every gradient: the summed-area tables of Algorithm 1 with the Appendix-B backward (float64
gradcheck, memory linear in the tokens) and the one-program Triton form (the N x N weighting
``w_m + beta_r``; half inputs, float64 gradcheck). Triton runs compiled on a GPU, else under
``TRITON_INTERPRET=1`` (tests/conftest.py)."""
import pytest
import torch

from lab.experimental.ripple_fused import FusedRipple, ripple_attention_fused
from lab.experimental.ripple_sat import ripple_attention_sat, vicinal_sum
from mmvisattn.ops.ripple import ripple_attention_reference

from ..conftest import KERNEL_DEVICE, float64_dot, kernel_tolerance
from ..test_ops.test_ripple import CASES, assert_matches_reference, inputs


@pytest.mark.parametrize('height,width,r_max,tau', CASES)
def test_summed_area_tables_equal_reference(height, width, r_max, tau):
    assert_matches_reference(ripple_attention_sat, (height, width), r_max, tau)


def test_summed_area_tables_save_memory_linear_in_tokens():
    """What autograd keeps grows with the tokens, not with their square (R_max fixed)."""
    def saved_elements(hw_shape):
        sizes = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: sizes.append(t.numel()) or t,
                                                      lambda t: t):
            ripple_attention_sat(
                *(t.detach().float().requires_grad_() for t in inputs(hw_shape, 4)), hw_shape, 1e-3,
                1e-6,
            )
        return sum(sizes)
    assert saved_elements((16, 32)) < 2.2 * saved_elements((16, 16))
    assert saved_elements((32, 32)) < 4.4 * saved_elements((16, 16))


# odd maps over one and several blocks of queries (64) and keys (32), R_max past the map, one token,
# the merge; heads over 64 wide on the wide launches (smaller blocks)
@pytest.mark.parametrize('height,width,r_max,tau,dims',
                         [(5, 7, 2, 1e-3, 4), (9, 11, 3, 1e-3, 4), (3, 4, 6, 0.3, 4),
                                                          (1, 1, 2, 1e-3, 4), (9, 8, 2, 1e-3, 70)])
def test_fused_equals_reference(height, width, r_max, tau, dims):
    """The one-program form (the N x N weighting ``w_m + beta_r``) in value and every gradient."""
    assert_matches_reference(ripple_attention_fused, (height, width), r_max, tau,
                             dtype=torch.float32, tol=kernel_tolerance(KERNEL_DEVICE), batch=2,
                             heads=2, dims=dims, device=KERNEL_DEVICE)


@float64_dot
def test_gradcheck_fused_forward_with_its_backward():
    """The kernel's forward (float64 under the interpreter) with the dense blocks' backward, the
    weight table a leaf: 70 queries over two blocks, heads 3 and values 5 wide."""
    torch.manual_seed(0)
    hw_shape, groups = (7, 10), 4
    q, k = (torch.rand(2, 70, 3, dtype=torch.float64, device=KERNEL_DEVICE) for _ in range(2))
    v = torch.randn(2, 70, 5, dtype=torch.float64, device=KERNEL_DEVICE)
    table = torch.rand(2, 70, groups, dtype=torch.float64, device=KERNEL_DEVICE)
    assert torch.autograd.gradcheck(lambda *a: FusedRipple.apply(*a, hw_shape, 1e-6),
                                    [t.requires_grad_() for t in (q, k, v, table)], fast_mode=True)


@pytest.mark.parametrize('dtype,scale',
                         [(torch.bfloat16, 1.0), (torch.float16, 1.0), (torch.float16, 400.0)])
def test_fused_in_half_precision(dtype, scale):
    """Half inputs against the float32 reference; float16 features up to 400 wide, whose weighted
    scores (up to 6.4e5) pass float16's range, meet the values in float32, so the output stays
    finite and right."""
    q, k, v, logits = inputs((6, 9), 3, batch=1, heads=2, dims=4, value_dims=8, dtype=torch.float32,
                             device=KERNEL_DEVICE)
    q, k = (t.detach() * scale for t in (q, k))
    out = ripple_attention_fused(q.to(dtype), k.to(dtype), v.to(dtype), logits.to(dtype), (6, 9),
                                 1e-3, 1e-6)
    expected = ripple_attention_reference(*(t.to(dtype).float() for t in (q, k, v, logits)), (6, 9))
    assert out.dtype == dtype and torch.isfinite(out).all()
    torch.testing.assert_close(out.float(), expected, **kernel_tolerance(KERNEL_DEVICE, dtype))


def test_gradcheck_summed_area_backward():
    """The hand-written Appendix-B backward of the summed-area-table DP, in float64."""
    torch.manual_seed(0)
    args = [torch.randn(2, 4, 5, 3, dtype=torch.float64),
            torch.randn(2, 4, 5, 3, dtype=torch.float64), torch.randn(2, 4, 5, dtype=torch.float64)]
    assert torch.autograd.gradcheck(vicinal_sum, [t.requires_grad_() for t in args], fast_mode=True)
