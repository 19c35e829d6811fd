"""Random-walk graph kernel op: Woodbury form == explicit N x N inverse (Eq. 5 vs Eq. 8),
normalised rows (Lemma 1), the hand-written backward (gradcheck, slices of heads), saved memory of
the inputs' size, autocast stability, bad lambda; the Woodbury form and its backward on every device
of the suite."""
import pytest
import torch

from mmvisattn.ops.rwgk import rwgk_attention, rwgk_attention_reference
from mmvisattn.ops.rwgk.common import bipartite_graphs
from mmvisattn.ops.rwgk.reference import rwgk_kernel_reference

from ..conftest import saved_elements


def inputs(batch=2, heads=3, tokens=20, anchors=7, dims=8, dtype=torch.float64, scale=1.0,
           shared_anchors=True, device='cpu'):
    torch.manual_seed(tokens * 31 + anchors)
    q, k, v = (scale * torch.randn(batch, heads, tokens, dims, dtype=dtype) for _ in range(3))
    anchor_batch = 1 if shared_anchors else batch
    anchor_q, anchor_k = (torch.randn(anchor_batch, heads, anchors, dims,
                                      dtype=dtype) for _ in range(2))
    return tuple(t.to(device) for t in (q, k, v, anchor_q, anchor_k))


@pytest.mark.parametrize('lam', [0.1, 0.5, 0.9, 0.99])
@pytest.mark.parametrize('tokens,anchors,heads', [(20, 7, 3), (33, 1, 1), (9, 16, 2), (64, 64, 4)])
def test_woodbury_equals_explicit_inverse(lam, tokens, anchors, heads, device):
    args = inputs(heads=heads, tokens=tokens, anchors=anchors, device=device)
    torch.testing.assert_close(rwgk_attention(*args, lam=lam),
                               rwgk_attention_reference(*args, lam=lam), rtol=1e-9, atol=1e-10)


def test_per_sample_anchors():
    args = inputs(shared_anchors=False)
    torch.testing.assert_close(rwgk_attention(*args), rwgk_attention_reference(*args), rtol=1e-9,
                               atol=1e-10)


@pytest.mark.parametrize('lam', [0.1, 0.5, 0.9])
def test_kernel_rows_sum_to_one(lam):
    q, k, _, anchor_q, anchor_k = inputs()
    kernel = rwgk_kernel_reference(q, k, anchor_q, anchor_k, lam)
    torch.testing.assert_close(kernel.sum(-1), torch.ones_like(kernel.sum(-1)))
    assert (kernel >= 0).all()
    graph_q, graph_k = bipartite_graphs(q, k, anchor_q, anchor_k)
    torch.testing.assert_close((graph_q @ graph_k).sum(-1), torch.ones_like(kernel.sum(-1)))


def test_constant_values_pass_through():
    """A row-stochastic kernel maps a constant value map to itself."""
    q, k, _, anchor_q, anchor_k = inputs()
    v = torch.full_like(q, 2.5)
    torch.testing.assert_close(rwgk_attention(q, k, v, anchor_q, anchor_k), v)


@pytest.mark.parametrize('shared_anchors', [True, False])
def test_gradcheck_hand_written_backward(shared_anchors, device):
    args = [t.requires_grad_() for t in inputs(batch=2, heads=2, tokens=6, anchors=3, dims=4,
                                               shared_anchors=shared_anchors, device=device)]
    assert torch.autograd.gradcheck(lambda *a: rwgk_attention(*a, lam=0.7), args)


@pytest.mark.parametrize('one_head_per_slice', [False, True])
@pytest.mark.parametrize('shared_anchors', [True, False])
def test_gradients_match_reference(monkeypatch, one_head_per_slice, shared_anchors):
    """The whole batch in one slice (anchor gradients summed over the images sharing them) and
    slices of one head of one image (summed over the slices)."""
    if one_head_per_slice:
        monkeypatch.setattr('mmvisattn.ops.rwgk.pytorch.GRAPH_BUDGET', 1)
    args = [t.requires_grad_() for t in inputs(tokens=15, anchors=5, shared_anchors=shared_anchors)]
    weights = torch.randn_like(args[0])
    fast, slow = rwgk_attention(*args), rwgk_attention_reference(*args)
    torch.testing.assert_close(fast, slow, rtol=1e-9, atol=1e-10)
    for a, b in zip(torch.autograd.grad((fast * weights).sum(), args),
                    torch.autograd.grad((slow * weights).sum(), args)):
        torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16])
@pytest.mark.parametrize('scale', [1.0, 60.0])
def test_autocast_stays_finite(dtype, scale):
    """Half-precision graphs with large activations saturate, but the M x M system is solved in
    float32, so nothing overflows; at ordinary scale the result follows float32."""
    q, k, v, anchor_q, anchor_k = (
        t.to(dtype).float() for t in inputs(scale=scale, tokens=256, anchors=64, dims=32)
    )
    with torch.autocast('cpu', dtype=dtype):
        out = rwgk_attention(q.to(dtype), k.to(dtype), v.to(dtype), anchor_q, anchor_k, lam=0.9)
    assert out.dtype == dtype
    assert torch.isfinite(out).all()
    if scale == 1.0:
        reference = rwgk_attention(q, k, v, anchor_q, anchor_k, lam=0.9)
        assert (out.float() - reference).abs().max() < 0.05 * reference.abs().max()


@pytest.mark.parametrize('lam', [0.0, 1.0, -0.5, 1.5])
def test_lambda_outside_open_interval_is_refused(lam):
    with pytest.raises(ValueError, match=rf'lam={lam} must lie in the open interval \(0, 1\)'):
        rwgk_attention(*inputs(), lam=lam)


def test_saved_memory_is_the_inputs():
    """The backward recomputes the N x M graphs: autograd saves the inputs and the M x M system, so
    the saved memory grows by ``3 d`` values per token and head (q, k, v), as SDPA's ``4 d + 1``."""
    dims = 8

    def saved(tokens):
        q, k, v, anchor_q, anchor_k = (
            t.float().requires_grad_() for t in inputs(tokens=tokens, anchors=16, dims=dims)
        )
        return saved_elements(lambda: rwgk_attention(q, k, v, anchor_q, anchor_k))

    per_token = (saved(1024) - saved(256)) / (768 * 2 * 3)  # batch 2, 3 heads
    assert per_token == 3 * dims


def test_impl_selects_the_implementation():
    """``'torch'`` and ``'auto'`` run the linear form; the reference is no backend."""
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 10, 4, generator=generator, dtype=torch.float64) for _ in range(3))
    anchor_q, anchor_k = (torch.randn(1, 2, 3, 4, generator=generator,
                                      dtype=torch.float64) for _ in range(2))
    expected = rwgk_attention_reference(q, k, v, anchor_q, anchor_k, 0.3)
    for impl in ('torch', 'auto'):
        torch.testing.assert_close(rwgk_attention(q, k, v, anchor_q, anchor_k, 0.3, impl=impl),
                                   expected)
    with pytest.raises(
        ValueError, match=r"^rwgk_attention: impl='triton'; expected one of \('auto', 'torch'\)$"
    ):
        rwgk_attention(q, k, v, anchor_q, anchor_k, impl='triton')


@pytest.mark.parametrize('lam', [0.1, 0.5, 0.9, 0.99])
def test_neumann_solve_equals_the_solve(lam):
    """The deploy backends' solve (matrix products only) against ``torch.linalg.solve`` on RWGK's
    systems: ``I - lam G_K G_Q`` with row-stochastic graphs, to float32's resolution whatever
    ``lam``."""
    from mmvisattn.ops.rwgk import neumann_solve
    generator = torch.Generator().manual_seed(0)
    graph_k = torch.rand(2, 3, 16, 40, generator=generator).softmax(-1)
    graph_q = torch.rand(2, 3, 40, 16, generator=generator).softmax(-1)
    system = torch.eye(16) - lam * graph_k @ graph_q
    rhs = torch.randn(2, 3, 16, 8, generator=generator)
    exact = torch.linalg.solve(system.double(), rhs.double())
    assert ((neumann_solve(system, rhs, lam).double()
             - exact).abs().max() / exact.abs().max()) < 1e-5
