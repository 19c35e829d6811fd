"""The attention contract (for every registered attention, on every device of the suite, and
``impl='auto'`` equal to the torch path there) and the three baselines against their references:
explicit softmax, the explicit quadratic form of linear attention, and mmseg's stock
EfficientMultiheadAttention."""
import inspect

import pytest
import torch
import torch.nn as nn

import mmvisattn  # noqa: F401
from mmvisattn.models.attentions import BaseAttention
from mmvisattn.ops.linearized import elu_feature_map
from mmvisattn.ops.ripple import chebyshev_distances, group_weights
from mmvisattn.registry import ATTENTIONS, build_attention

from ...conftest import kernel_tolerance

ALL_TYPES = sorted(ATTENTIONS.module_dict)


@pytest.mark.parametrize('attn_type', ALL_TYPES)
@pytest.mark.parametrize('hw_shape', [(7, 9), (1, 1), (16, 16)])
@pytest.mark.parametrize('num_extra_tokens', [0, 2])
def test_contract_shapes(attn_type, hw_shape, num_extra_tokens, device):
    attn = build_attention(dict(type=attn_type), num_extra_tokens=num_extra_tokens, embed_dims=32,
                           num_heads=4).to(device)
    assert isinstance(attn, BaseAttention)
    assert attn.complexity in ('linear', 'quadratic')
    assert attn.num_extra_tokens == num_extra_tokens
    x = torch.randn(2, num_extra_tokens + hw_shape[0] * hw_shape[1], 32, device=device,
                    requires_grad=True)
    out = attn(x, hw_shape)
    assert out.shape == x.shape
    out.sum().backward()
    assert torch.isfinite(x.grad).all()


@pytest.mark.parametrize('attn_type', ALL_TYPES)
def test_every_attention_states_how_it_treats_extra_tokens(attn_type):
    attn_class = ATTENTIONS.get(attn_type)
    assert (
        attn_class.extra_tokens and 'num_extra_tokens' in inspect.signature(attn_class).parameters
    )


@pytest.mark.parametrize('attn_type', ALL_TYPES)
def test_extra_tokens_are_attended_by_the_map(attn_type):
    """Every spatial token reads the extra tokens: a change of one extra token moves every
    output."""
    torch.manual_seed(0)
    attn = build_attention(dict(type=attn_type), num_extra_tokens=1, embed_dims=16,
                           num_heads=2).double().eval()
    x = torch.randn(1, 1 + 4 * 5, 16, dtype=torch.float64)
    moved = x.clone()
    moved[:, 0] += 1.0
    changed = (attn(x, (4, 5)) - attn(moved, (4, 5))).abs().amax(dim=-1)[0]
    assert (changed > 1e-9).all()


def test_a_count_other_than_the_backbones_is_refused():
    with pytest.raises(ValueError,
                       match=r'^ViL: attn_cfg sets num_extra_tokens=2 for SoftmaxAttention, but '
                       r'its '
                                         r'tokens have 1 in front of the map; leave '
                                         r'num_extra_tokens out'):
        build_attention(dict(type='SoftmaxAttention', num_extra_tokens=2), owner='ViL',
                        num_extra_tokens=1, embed_dims=16, num_heads=2)


def test_a_module_without_extra_tokens_is_refused_where_there_are_some():
    @ATTENTIONS.register_module(force=True)
    class GridOnlyAttention(nn.Module):
        def __init__(self, embed_dims, num_heads):
            super().__init__()

    try:
        assert build_attention(dict(type='GridOnlyAttention'), embed_dims=16, num_heads=2)
        with pytest.raises(ValueError,
                           match=r'^CastlingViT: GridOnlyAttention takes no num_extra_tokens, but '
                           r'its '
                                             r'tokens have 1 in front of the map'):
            build_attention(dict(type='GridOnlyAttention'), owner='CastlingViT', num_extra_tokens=1,
                            embed_dims=16, num_heads=2)
    finally:
        ATTENTIONS.module_dict.pop('GridOnlyAttention')


def test_ripple_with_extra_tokens_equals_the_explicit_form():
    """Spatial queries weigh grid keys by their group (Eq. 4-6) and extra keys by 1, one normaliser;
    extra queries take the linearized attention over every token."""
    torch.manual_seed(0)
    attn = build_attention(dict(type='RippleAttention', r_max=2), num_extra_tokens=2, embed_dims=16,
                           num_heads=2).double()
    hw_shape, extra = (5, 6), 2
    q = torch.rand(2, 2, extra + 30, 8, dtype=torch.float64)
    k = torch.rand_like(q)
    v = torch.randn_like(q)
    weights = group_weights(attn.stick_logits(v[:, :, extra:]), hw_shape, attn.tau)
    token_weights = weights.gather(
        -1, chebyshev_distances(hw_shape, q.device).expand(*weights.shape[:-2], -1, -1)
    )
    token_weights = torch.cat([torch.ones(2, 2, 30, extra, dtype=torch.float64), token_weights],
                              dim=-1)
    scores = (q[:, :, extra:] @ k.transpose(-1, -2)) * token_weights
    spatial = scores @ v / (scores.sum(dim=-1, keepdim=True) + attn.eps)
    extra_scores = q[:, :, :extra] @ k.transpose(-1, -2)
    extra_rows = extra_scores @ v / (extra_scores.sum(dim=-1, keepdim=True) + attn.eps)
    torch.testing.assert_close(attn.attend_features(q, k, v, hw_shape),
                               torch.cat([extra_rows, spatial], dim=2))


def test_peripheral_extra_tokens_attend_by_content_alone():
    """Position attention 1 for every pair with an extra token: their rows are softmax attention."""
    torch.manual_seed(0)
    attn = build_attention(dict(type='PeripheralAttention'), num_extra_tokens=1, embed_dims=16,
                           num_heads=2).double().eval()
    q, k, v = (torch.randn(2, 2, 1 + 12, 8, dtype=torch.float64) for _ in range(3))
    expected = torch.softmax(q[:, :, :1] @ k.transpose(-1, -2) * attn.scale, dim=-1) @ v
    torch.testing.assert_close(attn.attend(q, k, v, (3, 4))[:, :, :1], expected)


@pytest.mark.parametrize('attn_type',
                         [name for name in ALL_TYPES if 'torch' in ATTENTIONS.get(name).impls])
def test_auto_runs_and_equals_the_torch_path(attn_type, device):
    """Whatever ``auto`` picks on the device (Triton on CUDA, the C++ kernels or a dense form on
    CPU), the training step equals the torch path's, within the tolerance of the products it
    runs."""
    torch.manual_seed(0)
    attn = build_attention(dict(type=attn_type), embed_dims=32, num_heads=2).to(device).train()
    x = torch.randn(2, attn.num_extra_tokens + 63, 32, device=device, requires_grad=True)
    results = []
    for impl in ('auto', 'torch'):
        attn.impl = impl
        out = attn(x, (7, 9))
        grads = torch.autograd.grad(out.square().sum(), [x, *attn.parameters()], allow_unused=True)
        results.append([out, *(grad for grad in grads if grad is not None)])
    for auto, torch_path in zip(*results):
        torch.testing.assert_close(auto, torch_path, **kernel_tolerance(device))


@pytest.mark.parametrize('attn_type', ALL_TYPES)
def test_contract_rejects_wrong_grid(attn_type):
    attn = build_attention(dict(type=attn_type), embed_dims=32, num_heads=4)
    tokens = attn.num_extra_tokens + 12
    x = torch.randn(1, tokens, 32)
    with pytest.raises(ValueError, match=rf'\b{tokens} tokens do not match hw_shape=\(4, 4\)'):
        attn(x, (4, 4))


MULTI_IMPL_TYPES = [name for name in ALL_TYPES if ATTENTIONS.get(name).impls]


def test_the_attentions_with_several_implementations():
    assert MULTI_IMPL_TYPES == ['LinearAngularAttention', 'LongformerAttention',
                                'PeripheralAttention', 'RWGKAttention', 'RippleAttention']


@pytest.mark.parametrize('attn_type', MULTI_IMPL_TYPES)
def test_bad_impl_fails_when_built(attn_type):
    """Every attention with several implementations checks ``impl`` in ``__init__``, in one line."""
    with pytest.raises(ValueError, match=rf"^{attn_type}: impl='cuda'; expected one of \('auto', "):
        build_attention(dict(type=attn_type, impl='cuda'), embed_dims=32, num_heads=4)


@pytest.mark.parametrize('attn_type', ALL_TYPES)
def test_attn_drop_is_applied_or_refused_when_built(attn_type):
    """No attention ignores ``attn_drop``: it drops attention weights in training (two training
    passes differ, evaluation is deterministic), or it refuses a non-zero value at build time in one
    line that says why."""
    attn_class = ATTENTIONS.get(attn_type)
    if attn_class.attn_drop_unsupported:
        with pytest.raises(ValueError,
                           match=rf'^{attn_type}: attn_drop=0.5 is not supported; expected 0, '):
            build_attention(dict(type=attn_type, attn_drop=0.5), embed_dims=32, num_heads=4)
        build_attention(dict(type=attn_type, attn_drop=0.0), embed_dims=32, num_heads=4)
        return
    torch.manual_seed(0)
    attn = build_attention(dict(type=attn_type, attn_drop=0.5), embed_dims=32, num_heads=4)
    x = torch.randn(2, attn.num_extra_tokens + 36, 32)
    attn.train()
    assert not torch.allclose(attn(x, (6, 6)), attn(x, (6, 6)))
    attn.eval()
    torch.testing.assert_close(attn(x, (6, 6)), attn(x, (6, 6)))


def test_the_attentions_that_refuse_attn_drop():
    refusing = [name for name in ALL_TYPES if ATTENTIONS.get(name).attn_drop_unsupported]
    assert refusing == ['LinearAttention', 'LongformerAttention', 'PeripheralAttention',
                        'RWGKAttention', 'RippleAttention', 'RippleLinearAttention']


def test_unknown_type_names_the_type():
    with pytest.raises(KeyError, match="unknown attention type 'NoSuchAttention'; registered: "
                       ".*SoftmaxAttention"):
        build_attention(dict(type='NoSuchAttention'), embed_dims=32, num_heads=4)


def test_heads_must_divide_dims():
    with pytest.raises(ValueError,
                       match='embed_dims=30 must be a positive multiple of num_heads=4'):
        build_attention(dict(type='SoftmaxAttention'), embed_dims=30, num_heads=4)


def heads(attn, x):
    q, k, v = attn.qkv(x).chunk(3, dim=-1)
    return attn.split_heads(q), attn.split_heads(k), attn.split_heads(v)


def test_softmax_matches_explicit_reference():
    attn = build_attention(dict(type='SoftmaxAttention'), embed_dims=24,
                           num_heads=3).double().eval()
    x = torch.randn(2, 5 * 7, 24, dtype=torch.float64)
    q, k, v = heads(attn, x)
    weights = torch.softmax(q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5, dim=-1)
    expected = attn.proj(attn.merge_heads(weights @ v))
    torch.testing.assert_close(attn(x, (5, 7)), expected)


def test_linear_matches_explicit_quadratic_form():
    attn = build_attention(dict(type='LinearAttention'), embed_dims=24, num_heads=3).double()
    x = torch.randn(2, 6 * 5, 24, dtype=torch.float64)
    q, k, v = heads(attn, x)
    scores = elu_feature_map(q) @ elu_feature_map(k).transpose(-1, -2)
    weights = scores / scores.sum(dim=-1, keepdim=True)
    torch.testing.assert_close(weights.sum(-1), torch.ones_like(weights.sum(-1)))
    expected = attn.proj(attn.merge_heads(weights @ v))
    torch.testing.assert_close(attn(x, (6, 5)), expected)


@pytest.mark.parametrize('sr_ratio,hw_shape',
                         [(1, (5, 6)), (2, (8, 8)), (4, (9, 13)), (8, (16, 8))])
def test_spatial_reduction_matches_mmseg(sr_ratio, hw_shape):
    from mmseg.models.backbones.mit import EfficientMultiheadAttention
    torch.manual_seed(0)
    ours = build_attention(dict(type='SpatialReductionAttention', sr_ratio=sr_ratio), embed_dims=32,
                           num_heads=4).eval()
    stock = EfficientMultiheadAttention(embed_dims=32, num_heads=4, sr_ratio=sr_ratio,
                                        qkv_bias=True, norm_cfg=dict(type='LN', eps=1e-6)).eval()
    with torch.no_grad():
        stock.attn.in_proj_weight.copy_(torch.cat([ours.q.weight, ours.kv.weight]))
        stock.attn.in_proj_bias.copy_(torch.cat([ours.q.bias, ours.kv.bias]))
        stock.attn.out_proj.weight.copy_(ours.proj.weight)
        stock.attn.out_proj.bias.copy_(ours.proj.bias)
        if sr_ratio > 1:
            stock.sr.load_state_dict(ours.sr.state_dict())
            stock.norm.load_state_dict(ours.norm.state_dict())
    x = torch.randn(2, hw_shape[0] * hw_shape[1], 32)
    stock_out = stock(x, hw_shape, identity=torch.zeros_like(x))
    torch.testing.assert_close(ours(x, hw_shape), stock_out, rtol=1e-4, atol=1e-5)


def test_spatial_reduction_map_smaller_than_ratio_is_legal():
    attn = build_attention(dict(type='SpatialReductionAttention', sr_ratio=8), embed_dims=16,
                           num_heads=2)
    assert attn(torch.randn(1, 3 * 5, 16), (3, 5)).shape == (1, 15, 16)


def test_spatial_reduction_rejects_bad_ratio():
    with pytest.raises(ValueError, match='sr_ratio=0 must be a positive integer'):
        build_attention(dict(type='SpatialReductionAttention', sr_ratio=0), embed_dims=16,
                        num_heads=2)


def test_dropout_only_in_training():
    attn = build_attention(dict(type='SoftmaxAttention', attn_drop=0.5), embed_dims=16, num_heads=2)
    x = torch.randn(1, 16, 16)
    attn.eval()
    torch.testing.assert_close(attn(x, (4, 4)), attn(x, (4, 4)))
    attn.train()
    assert not torch.allclose(attn(x, (4, 4)), attn(x, (4, 4)))
