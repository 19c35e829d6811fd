"""RippleAttention and RippleLinearAttention (arXiv:2110.02453): parameter counts by the docstring's
formula, the linearized twin against its explicit N x N form, every operator implementation giving
the same module output and gradients, the Gaussian W1 of Eq. 13 surviving Linear initialisers, and
one-line errors for bad settings. The shared contract (shapes, wrong grids) is in
test_contract.py."""
import pytest
import torch

import mmvisattn  # noqa: F401
from mmvisattn.registry import build_attention


def parameters(module):
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize('embed_dims,num_heads,r_max', [(192, 6, 4), (256, 8, 4), (96, 6, 8)])
def test_parameter_counts(embed_dims, num_heads, r_max):
    c, d = embed_dims, embed_dims // num_heads
    linear = build_attention(dict(type='RippleLinearAttention'), embed_dims=c, num_heads=num_heads)
    ripple = build_attention(dict(type='RippleAttention', r_max=r_max), embed_dims=c,
                             num_heads=num_heads)
    assert parameters(linear) == 4 * c * c + 4 * c + 3 * d * d + d
    assert parameters(ripple) == 4 * c * c + 4 * c + 4 * d * d + 2 * d + c * r_max


def test_parameter_counts_of_the_paper_widths():
    """DeiT-Ripple (C = 192, 6 heads) and SMCA (C = 256, 8 heads) layers, R_max = 4."""
    assert parameters(build_attention(dict(type='RippleLinearAttention'), embed_dims=192,
                                      num_heads=6)) == 151_328
    assert parameters(build_attention(dict(type='RippleAttention'), embed_dims=192,
                                      num_heads=6)) == 153_152
    assert parameters(build_attention(dict(type='RippleLinearAttention'), embed_dims=256,
                                      num_heads=8)) == 266_272
    assert parameters(build_attention(dict(type='RippleAttention'), embed_dims=256,
                                      num_heads=8)) == 268_352


def test_linear_twin_equals_explicit_quadratic_form():
    attn = build_attention(dict(type='RippleLinearAttention'), embed_dims=24, num_heads=3).double()
    x = torch.randn(2, 5 * 6, 24, dtype=torch.float64)
    q, k, v = (attn.split_heads(t) for t in attn.qkv(x).chunk(3, dim=-1))
    phi_q, phi_k = (attn.feature_map(t * 8 ** -0.25) for t in (q, k))
    assert (phi_q >= 0).all()
    scores = phi_q @ phi_k.transpose(-1, -2)
    expected = attn.proj(attn.merge_heads(scores @ v / (scores.sum(-1, keepdim=True) + attn.eps)))
    torch.testing.assert_close(attn(x, (5, 6)), expected)


@pytest.mark.parametrize('impl', ['dense', 'cpu'])
@pytest.mark.parametrize('hw_shape,r_max', [((5, 7), 3), ((3, 3), 8)])
def test_implementations_agree_in_the_module(impl, hw_shape, r_max):
    """Each backend against the torch tiles (each tested against the op's reference), in the
    module."""
    torch.manual_seed(0)
    reference = build_attention(dict(type='RippleAttention', r_max=r_max, impl='torch'),
                                embed_dims=24, num_heads=3).double()
    fast = build_attention(dict(type='RippleAttention', r_max=r_max, impl=impl), embed_dims=24,
                           num_heads=3).double()
    fast.load_state_dict(reference.state_dict())
    x = torch.randn(2, hw_shape[0] * hw_shape[1], 24, dtype=torch.float64)
    outputs = [m(x, hw_shape) for m in (reference, fast)]
    torch.testing.assert_close(outputs[1], outputs[0])
    grads = [torch.autograd.grad(out.square().sum(), list(m.parameters()))
             for m, out in zip((reference, fast), outputs)]
    for name, a, b in zip(dict(reference.named_parameters()), *grads):
        torch.testing.assert_close(b, a, msg=lambda m: f'{name}: {m}')  # noqa: B023


def test_heads_get_their_own_spatial_weights():
    attn = build_attention(dict(type='RippleAttention', r_max=3), embed_dims=24, num_heads=3)
    logits = attn.stick_logits(attn.split_heads(torch.randn(1, 4, 24)))
    assert logits.shape == (1, 3, 4, 3) and attn.stick_embeds.shape == (3, 3, 8)
    assert not torch.allclose(logits[:, 0], logits[:, 1])


def test_gaussian_w1_survives_linear_initialisers():
    attn = build_attention(dict(type='RippleAttention',
                                init_cfg=dict(type='TruncNormal', layer='Linear', std=0.02)),
                           embed_dims=192, num_heads=6)
    attn.init_weights()
    assert attn.qkv.weight.std() < 0.05
    assert 0.9 < attn.feature_map.w1.std() < 1.1


@pytest.mark.parametrize('options,message', [
    (dict(r_max=0), r'r_max=0; expected an integer >= 1'),
    (dict(r_max=2.5), r'r_max=2.5; expected an integer >= 1'),
    (dict(tau=0.0), r'tau=0.0; expected 0 < tau < 1'),
    (dict(tau=1.0), r'tau=1.0; expected 0 < tau < 1'),
    (dict(impl='cuda'), r"impl='cuda'; expected one of"),
    (dict(num_features=0), r'num_features=0; expected a positive integer'),
])
def test_bad_settings_one_line(options, message):
    with pytest.raises(ValueError, match=message):
        build_attention(dict(type='RippleAttention', **options), embed_dims=24, num_heads=3)


def test_attention_maps_are_rings_around_the_query():
    from mmvisattn.ops.ripple import chebyshev_distances
    attn = build_attention(dict(type='RippleAttention'), embed_dims=32, num_heads=2, r_max=3).eval()
    x = torch.randn(2, 5 * 7, 32)
    maps = attn.attention_maps(x, (5, 7), (2, 3))['spatial_weights']
    assert maps.shape == (2, 5, 7)
    distance = chebyshev_distances((5, 7))[2 * 7 + 3].view(5, 7)
    for ring in range(distance.max() + 1):
        values = maps[:, distance == ring]
        torch.testing.assert_close(values, values[:, :1].expand_as(values))  # one weight per ring
    group_sizes = torch.bincount(distance.flatten()).float()
    per_group = torch.stack([maps[:, distance == ring][:, 0] for ring in range(len(group_sizes))],
                            dim=1)
    torch.testing.assert_close(per_group.sum(dim=1), torch.ones(2))  # group weights on the simplex
