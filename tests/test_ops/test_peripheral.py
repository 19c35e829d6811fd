"""Peripheral-attention ops (PerViT, arXiv:2206.06801): the SDPA mixing equals the explicit Eq. 5,
and the relative-offset ``Phi_p`` equals the literal Eq. 7-8 on the full distance tensor, in value
and gradient, for odd and non-square grids and batch > 1, on every device of the suite. Triton runs
compiled on a GPU, else on CPU under TRITON_INTERPRET=1 (tests/conftest.py)."""
import math

import pytest
import torch
import torch.nn.functional as F

from mmvisattn.ops.peripheral import (
    PositionParams,
    mixed_attention_weights,
    peripheral_attention,
    peripheral_attention_reference,
    position,
    position_logits,
    position_logits_reference,
)
from mmvisattn.ops.peripheral.position import key_distances, peripheral_padding
from mmvisattn.ops.peripheral.reference import mixed_attention_reference

from ..conftest import KERNEL_DEVICE, kernel_tolerance, saved_elements


def attention_inputs(batch=2, heads=3, tokens=17, dims=8, dtype=torch.float64, device='cpu'):
    torch.manual_seed(tokens)
    q, k, v = (torch.randn(batch, heads, tokens, dims, dtype=dtype, device=device,
                           requires_grad=True)
               for _ in range(3))
    log_phi_p = F.logsigmoid(3 * torch.randn(heads, tokens, tokens, dtype=dtype,
                                             device=device)).requires_grad_()
    return q, k, v, log_phi_p


def position_params(kernel_size=3, heads=2, hidden=8, dtype=torch.float64,
                    device='cpu') -> PositionParams:
    torch.manual_seed(kernel_size)

    def rand(*shape):
        return torch.randn(*shape, dtype=dtype, device=device, requires_grad=True)
    return PositionParams(rand(hidden, 1), rand(hidden),
                          rand(hidden, hidden, kernel_size, kernel_size), rand(hidden),
                          rand(hidden), rand(hidden), rand(heads, hidden, kernel_size, kernel_size),
                          rand(heads), rand(heads), rand(heads))


def gradients(out, inputs, weights):
    """Gradients of ``(out * weights).sum()``; zeros for inputs it does not use (a 1 x 1 grid
    normalises everything but the last bias away)."""
    grads = torch.autograd.grad((out * weights).sum(), inputs, allow_unused=True)
    return [torch.zeros_like(t) if g is None else g for t, g in zip(inputs, grads)]


SIZES = [(1, 17, 8), (2, 1, 4), (3, 64, 16), (2, 30, 5)]


@pytest.mark.parametrize('batch,tokens,dims', SIZES)
def test_sdpa_form_equals_explicit_mixing(batch, tokens, dims, device):
    q, k, v, log_phi_p = attention_inputs(batch=batch, tokens=tokens, dims=dims, device=device)
    fast = peripheral_attention(q, k, v, log_phi_p, 0.3, impl='torch')
    slow = peripheral_attention_reference(q, k, v, log_phi_p, 0.3)
    torch.testing.assert_close(fast, slow)
    weights = torch.randn_like(fast)
    inputs = (q, k, v, log_phi_p)
    for a, b in zip(torch.autograd.grad((fast * weights).sum(), inputs),
                    torch.autograd.grad((slow * weights).sum(), inputs)):
        torch.testing.assert_close(a, b)


def test_mixed_attention_is_content_times_position_normalised():
    """The twin's weights are Eq. 5 literally; the softmax with the log position bias (the attention
    maps' weights) equals them."""
    q, k, _, log_phi_p = attention_inputs(batch=1, tokens=9)
    mixed = mixed_attention_reference(q, k, log_phi_p, 0.5)
    torch.testing.assert_close(mixed.sum(-1), torch.ones_like(mixed[..., 0]))
    unnormalised = torch.exp(0.5 * q @ k.transpose(-2, -1)) * log_phi_p.exp()
    torch.testing.assert_close(mixed, unnormalised / unnormalised.sum(-1, keepdim=True))
    torch.testing.assert_close(mixed_attention_weights(q, k, log_phi_p, 0.5), mixed)


def rows_per_chunk(monkeypatch, rows, hw_shape, kernel_size, hidden=8):
    """Make the torch ``Phi_p`` run ``rows`` query rows per recomputed chunk (``None``: in one
    piece)."""
    if rows is not None:
        pad = peripheral_padding(kernel_size)
        row_elements = hw_shape[1] * hidden * (hw_shape[0] + 2 * pad) * (hw_shape[1] + 2 * pad)
        monkeypatch.setattr(position, 'CHUNK_ELEMENTS', rows * row_elements)


@pytest.mark.parametrize('rows', [None, 1, 2], ids=['whole', 'chunks-of-1-row', 'chunks-of-2-rows'])
@pytest.mark.parametrize('hw_shape,kernel_size',
                         [((4, 4), 3), ((3, 5), 3), ((6, 2), 3), ((1, 1), 3), ((1, 4), 3),
                                                   ((7, 7), 1), ((3, 5), 1), ((5, 4), 5)])
def test_relative_position_form_equals_full_distance_tensor(
    monkeypatch, hw_shape, kernel_size, rows, device
):
    """In one piece and by chunks of query rows (the last one shorter on odd heights), each chunk
    recomputed in the backward."""
    rows_per_chunk(monkeypatch, rows, hw_shape, kernel_size)
    params = position_params(kernel_size, device=device)
    fast = position_logits(params, hw_shape, impl='torch')
    slow = position_logits_reference(params, hw_shape)
    assert fast.shape == (2, hw_shape[0] * hw_shape[1], hw_shape[0] * hw_shape[1])
    torch.testing.assert_close(fast, slow)
    weights = torch.randn_like(fast)
    for a, b in zip(gradients(fast, params, weights), gradients(slow, params, weights)):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize('hw_shape,kernel_size,heads,hidden',
                         [((3, 5), 3, 2, 8), ((4, 3), 5, 3, 4), ((2, 3), 1, 2, 8),
                                                             ((1, 1), 3, 2, 4)])
def test_triton_position_equals_full_distance_tensor(hw_shape, kernel_size, heads, hidden):
    """The five kernels (windows in registers, the written-out backward) against the float64 literal
    form: odd and non-square maps, K = 1, 3, 5 (window cells outside the map, taps past a block of
    16), heads and channels not powers of two. The gradients of the biases that the norms cancel are
    rounding noise in both, hence the absolute part of the tolerance, scaled by the largest
    gradient."""
    exact = position_params(kernel_size, heads, hidden)
    params = PositionParams(*(p.detach().float().to(KERNEL_DEVICE).requires_grad_() for p in exact))
    fast = position_logits(params, hw_shape, impl='triton')
    slow = position_logits_reference(exact, hw_shape)
    tolerance = kernel_tolerance(KERNEL_DEVICE)
    torch.testing.assert_close(fast.double().cpu(), slow, **tolerance)
    weights = torch.randn_like(slow)
    expected = gradients(slow, exact, weights)
    largest = max(g.abs().max().item() for g in expected)
    for name, a, b in zip(PositionParams._fields,
                          gradients(fast, params, weights.float().to(KERNEL_DEVICE)), expected):
        torch.testing.assert_close(a.double().cpu(), b, rtol=tolerance['rtol'],
                                   atol=tolerance['atol'] * largest,
                                   msg=lambda m: f'{name}: {m}')  # noqa: B023


def test_triton_position_under_bfloat16_autocast():
    """AMP: the first projection comes in bfloat16 and the products take it as operands (float32
    under the interpreter, which has no bfloat16 products); the logits stay float32, each gradient
    in its parameter's dtype."""
    exact = position_params(3, 2, 8)
    params = PositionParams(*(p.detach().float().to(KERNEL_DEVICE).requires_grad_() for p in exact))
    with torch.autocast(KERNEL_DEVICE.type, dtype=torch.bfloat16):
        fast = position_logits(params, (3, 5), impl='triton')
    slow = position_logits_reference(exact, (3, 5))
    assert fast.dtype == torch.float32
    torch.testing.assert_close(fast.double().cpu(), slow,
                               **kernel_tolerance(KERNEL_DEVICE, torch.bfloat16))
    grads = gradients(fast, params, torch.ones_like(fast))
    assert all(g.dtype == torch.float32 and g.isfinite().all() for g in grads)


def test_chunks_of_query_rows_keep_no_window_sized_tensor(monkeypatch):
    """What autograd keeps for ``Phi_p`` by chunks: the first projection's map and the logits, not
    the ``N x D_hid x (H + 2P) x (W + 2P)`` windows and their norms (12x12 map: 295 k numbers
    each)."""
    params = position_params()

    def saved(rows):
        rows_per_chunk(monkeypatch, rows, (12, 12), 3)
        return saved_elements(lambda: position_logits(params, (12, 12)))
    whole, chunked = saved(None), saved(3)
    windows = 144 * 8 * 16 * 16
    assert whole > 2 * windows
    assert (
        chunked
        < 2 * 144 * 144 + 8 * 31 * 31 + 144 + sum(p.numel() for p in params) + 1000
        < windows
    )


def test_coordinates_span_minus_one_to_one_along_the_longer_side():
    distances = key_distances(5, 5, 0, torch.zeros(()))
    assert distances.shape == (25, 5, 5)
    # corner to corner of [-1, 1]^2
    assert distances[0, -1, -1].item() == pytest.approx(2 * math.sqrt(2))
    wide = key_distances(3, 9, 2, torch.zeros(()))
    assert wide.shape == (27, 7, 13)
    assert wide[0, 2, 2 + 8].item() == pytest.approx(2.0)  # first to last token of the long side
    # two rows down: same step as along the long side
    assert wide[0, 4, 2].item() == pytest.approx(0.5)


def test_bad_impl_and_bias_shape_are_named():
    q, k, v, log_phi_p = attention_inputs(tokens=5)
    with pytest.raises(ValueError, match="impl='cuda'"):
        peripheral_attention(q, k, v, log_phi_p, 1.0, impl='cuda')
    with pytest.raises(ValueError, match=r'log_phi_p of shape \(3, 4, 4\)'):
        peripheral_attention(q, k, v, log_phi_p[:, :4, :4], 1.0)
    with pytest.raises(ValueError, match="impl='cuda'"):
        position_logits(position_params(), (3, 3), impl='cuda')
    with pytest.raises(ValueError,
                       match=r"position_logits\(impl='triton'\): dtype float64 is not supported"):
        position_logits(position_params(), (3, 3), impl='triton')


def test_chunks_take_parameters_without_gradients(monkeypatch):
    """By chunks, a parameter that wants no gradient (a frozen bias) is left out of the
    recomputation's gradients, and the others still equal the literal form's."""
    rows_per_chunk(monkeypatch, 1, (3, 5), 3)
    params = position_params()
    params = params._replace(conv2_bias=params.conv2_bias.detach())
    fast = position_logits(params, (3, 5), impl='torch')
    slow = position_logits_reference(params, (3, 5))
    weights = torch.randn_like(fast)
    wanted = [p for p in params if p.requires_grad]
    for a, b in zip(gradients(fast, wanted, weights), gradients(slow, wanted, weights)):
        torch.testing.assert_close(a, b)


def test_chunks_of_a_frozen_position_network(monkeypatch):
    """By chunks, with no parameter wanting a gradient (a frozen stage), the logits equal the
    literal form's and hold no graph (the recomputation had no tensor to run on: an IndexError)."""
    rows_per_chunk(monkeypatch, 1, (3, 5), 3)
    frozen = position_params()._replace(
        **{name: t.detach() for name, t in position_params()._asdict().items()}
    )
    fast = position_logits(frozen, (3, 5), impl='torch')
    assert fast.grad_fn is None
    torch.testing.assert_close(fast.double(), position_logits_reference(frozen, (3, 5)))
