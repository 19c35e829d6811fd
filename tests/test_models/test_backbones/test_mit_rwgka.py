"""RWGKAttention and MixVisionTransformerRWGKA: encoder sizes against Table 1 of the RWGK paper
(OpenReview, ICLR 2023), shapes, the stock-SegFormer rebuild through attn_cfg, per-stage settings
and bad input."""
import pytest
import torch
import torch.nn.functional as F
from mmseg.models.backbones import MixVisionTransformer
from mmseg.registry import MODELS

import mmvisattn  # noqa: F401
from mmvisattn.models.backbones.mit_rwgka import convert_mit_state_dict
from mmvisattn.ops.rwgk import rwgk_attention_reference
from mmvisattn.registry import build_attention
from mmvisattn.utils import count_parameters

# (embed_dims, num_layers) of mmseg's MiT configs and the encoder sizes of Table 1 (millions)
MIT = {'b0': (32, [2, 2, 2, 2]), 'b1': (64, [2, 2, 2, 2]), 'b2': (64, [3, 4, 6, 3])}
TABLE1_ENCODER_PARAMS = {'b0': 2.9, 'b1': 11.4, 'b2': 20.2}


def mit_kwargs(arch):
    embed_dims, num_layers = MIT[arch]
    return dict(embed_dims=embed_dims, num_layers=num_layers, num_heads=[1, 2, 5, 8])


@pytest.mark.parametrize('arch', sorted(TABLE1_ENCODER_PARAMS))
def test_encoder_parameters_match_table1(arch):
    model = MODELS.build(dict(type='MixVisionTransformerRWGKA', **mit_kwargs(arch)))
    millions = count_parameters(model) / 1e6
    assert abs(millions
               - TABLE1_ENCODER_PARAMS[arch]) <= 0.03 * TABLE1_ENCODER_PARAMS[arch], millions
    assert millions < count_parameters(MixVisionTransformer(**mit_kwargs(arch))) / 1e6


@pytest.mark.parametrize('size', [(64, 64), (96, 160), (33, 47)])
def test_backbone_shapes(size):
    model = MODELS.build(dict(type='MixVisionTransformerRWGKA', **mit_kwargs('b0'),
                              out_indices=(0, 1, 2, 3)))
    model.init_weights()
    outs = model(torch.randn(2, 3, *size))
    assert [o.shape[1] for o in outs] == [32, 64, 160, 256]
    grid = size
    for index, out in enumerate(outs):
        # overlapping patch embeddings: 7x7 stride 4 padding 3, then 3x3 stride 2 padding 1
        kernel, stride = (3, 2) if index else (7, 4)
        grid = tuple((side + 2 * (kernel // 2) - kernel) // stride + 1 for side in grid)
        assert out.shape[-2:] == grid


def test_spatial_reduction_attn_cfg_rebuilds_stock_segformer():
    torch.manual_seed(0)
    stock = MixVisionTransformer(**mit_kwargs('b0')).double().eval()
    ours = MODELS.build(dict(type='MixVisionTransformerRWGKA', **mit_kwargs('b0'),
                             attn_cfg=dict(type='SpatialReductionAttention'))).double().eval()
    assert [b.attn.attn.sr_ratio for stage in ours.layers for b in stage[1]] == [
        8, 8, 4, 4, 2, 2, 1, 1]
    converted, dropped = convert_mit_state_dict(stock.state_dict(), keep_spatial_reduction=True)
    assert not dropped
    ours.load_state_dict(converted)
    x = torch.randn(1, 3, 64, 64, dtype=torch.float64)
    for a, b in zip(stock(x), ours(x)):
        torch.testing.assert_close(a, b)


def test_per_stage_attention_settings():
    settings = ((16, 0.1), (32, 0.5), (64, 0.9), (8, 0.5))
    cfgs = [dict(type='RWGKAttention', num_anchors=m, lam=lam) for m, lam in settings]
    model = MODELS.build(dict(type='MixVisionTransformerRWGKA', **mit_kwargs('b0'), attn_cfg=cfgs))
    attns = [stage[1][0].attn.attn for stage in model.layers]
    assert [a.num_anchors for a in attns] == [16, 32, 64, 8]
    assert [a.lam for a in attns] == [0.1, 0.5, 0.9, 0.5]
    with pytest.raises(ValueError,
                       match='attn_cfg lists 2 stage settings; the backbone has 4 stages'):
        MODELS.build(dict(type='MixVisionTransformerRWGKA', **mit_kwargs('b0'), attn_cfg=cfgs[:2]))


def test_module_matches_reference_op():
    attn = build_attention(dict(type='RWGKAttention', num_anchors=5, lam=0.3), embed_dims=12,
                           num_heads=3).double()
    x = torch.randn(2, 4 * 5, 12, dtype=torch.float64)
    q = attn.split_heads(attn.q(x))
    k, v = (attn.split_heads(t) for t in attn.kv(x).chunk(2, dim=-1))
    expected = rwgk_attention_reference(q, k, v, attn.anchor_q[None], attn.anchor_k[None], lam=0.3)
    torch.testing.assert_close(attn(x, (4, 5)), attn.proj(attn.merge_heads(expected)))


@pytest.mark.parametrize('hw_shape', [(2, 3), (1, 1), (12, 9)])
def test_pooled_anchors_any_map_size(hw_shape):
    """More pooled anchors (8 x 8) than tokens is legal and still yields normalised attention."""
    attn = build_attention(dict(type='RWGKAttention', anchor_mode='pooled', num_anchors=64),
                           embed_dims=16, num_heads=2)
    assert attn.num_anchors == 64 and not any(
        'anchor' in name for name, _ in attn.named_parameters()
    )
    x = torch.randn(2, hw_shape[0] * hw_shape[1], 16)
    out = attn(x, hw_shape)
    assert out.shape == x.shape and torch.isfinite(out).all()


@pytest.mark.parametrize('options,message', [
    (dict(lam=1.0), r'lam=1.0 must lie in the open interval \(0, 1\)'),
    (dict(num_anchors=0), 'num_anchors=0 must be a positive integer'),
    (dict(anchor_mode='random'), "anchor_mode='random'; expected one of"),
    (dict(attn_drop=0.1), 'attn_drop=0.1 is not supported'),
])
def test_bad_settings_name_the_value(options, message):
    with pytest.raises(ValueError, match=message):
        build_attention(dict(type='RWGKAttention', **options), embed_dims=16, num_heads=2)


def test_unknown_stage_setting_names_it():
    with pytest.raises(TypeError, match='anchors'):
        MODELS.build(dict(type='MixVisionTransformerRWGKA', **mit_kwargs('b0'),
                          attn_cfg=dict(type='RWGKAttention', anchors=64)))


@pytest.mark.parametrize('size', [(7, 9), (64, 64), (3, 5), (1, 1)])
def test_pooling_matrices_are_adaptive_average_pooling(size):
    """Pooled anchors (RWGKP) use products with pooling matrices, which ONNX export takes at any
    map size; they equal ``adaptive_avg_pool2d``'s bins."""
    from mmvisattn.models.attentions.rwgk import adaptive_pooling_matrix
    x = torch.randn(2, 6, *size, dtype=torch.float64)
    rows, cols = (adaptive_pooling_matrix(side, 8, x) for side in size)
    torch.testing.assert_close(torch.einsum('ih,nchw,jw->ncij', rows, x, cols),
                               F.adaptive_avg_pool2d(x, 8))
