"""DeiT-Ripple (arXiv:2110.02453, C.4-C.5): the hybrid layer layout, feature maps for dense heads,
mean pooling for classification, one-line errors, and the sizes of Table 1."""
import pytest
import torch
from mmseg.registry import MODELS

import mmvisattn  # noqa: F401
from mmvisattn.models.attentions import RippleAttention, RippleLinearAttention, SoftmaxAttention

SMALL = dict(img_size=(32, 32), embed_dims=48, num_layers=3, num_heads=2, num_ripple_layers=2)


def deit_ripple(**options):
    torch.manual_seed(0)
    model = MODELS.build(dict(type='DeiTRipple', **options))
    model.init_weights()
    model.eval()  # mmseg's ViT.train() returns None, so no chaining
    return model


def test_lower_layers_ripple_upper_layers_linearized():
    model = MODELS.build(dict(type='DeiTRipple'))
    kinds = [type(layer.attn.attn) for layer in model.layers]
    assert kinds == [RippleAttention] * 9 + [RippleLinearAttention] * 3
    assert not model.with_cls_token


@pytest.mark.parametrize('size', [(32, 32), (48, 80)])
def test_feature_maps_for_dense_heads(size):
    model = deit_ripple(**SMALL, out_indices=(0, 2))
    outs = model(torch.randn(2, 3, *size))
    assert [o.shape for o in outs] == [(2, 48, size[0] // 16, size[1] // 16)] * 2


def test_mean_pooling_replaces_the_class_token():
    x = torch.randn(2, 3, 32, 48)
    maps = deit_ripple(**SMALL)(x)
    pooled = deit_ripple(**SMALL, out_type='avg_featmap')(x)
    assert pooled[0].shape == (2, 48)
    torch.testing.assert_close(pooled[0], maps[0].mean(dim=(2, 3)))


@pytest.mark.parametrize('options, message', [
    (dict(num_ripple_layers=13), 'num_ripple_layers=13'),
    (dict(num_ripple_layers=-1), 'num_ripple_layers=-1'),
    (dict(out_type='cls_token'), "out_type='cls_token'"),
])
def test_bad_arguments_fail_in_one_line(options, message):
    with pytest.raises(ValueError, match=message) as info:
        MODELS.build(dict(type='DeiTRipple', **options))
    assert '\n' not in str(info.value)


def with_imagenet_head(model: torch.nn.Module) -> float:
    """Millions of parameters of the backbone plus a 1000-class linear head on the pooled tokens."""
    head = torch.nn.Linear(192, 1000)
    return (sum(p.numel() for p in model.parameters())
            + sum(p.numel() for p in head.parameters())) / 1e6


@pytest.mark.parametrize('options, paper_millions', [
    (dict(), 5.78),  # Ripple
    (dict(num_ripple_layers=0, attn_cfg=dict(type='SoftmaxAttention')), 5.72),  # DeiT (6 heads)
    (dict(num_ripple_layers=0), 5.76),  # DeiT-LA
])
def test_sizes_match_table_1(options, paper_millions):
    model = MODELS.build(dict(type='DeiTRipple', out_type='avg_featmap', **options))
    if 'attn_cfg' in options:
        assert isinstance(model.layers[0].attn.attn, SoftmaxAttention)
    millions = with_imagenet_head(model)
    assert abs(millions / paper_millions - 1) < 0.02, millions
