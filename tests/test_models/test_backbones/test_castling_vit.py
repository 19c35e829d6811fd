"""CastlingViT on mmseg's ViT: shapes with and without the class token, stock ViT rebuilt exactly
with softmax attention, deploy switch, and the timm / MAE converter."""
import pytest
import torch
from mmseg.models.backbones import VisionTransformer
from mmseg.registry import MODELS

import mmvisattn  # noqa: F401
from mmvisattn.models.backbones.castling_vit import convert_vit_state_dict

from ...conftest import run_tool

SMALL = dict(img_size=(64, 64), patch_size=16, embed_dims=96, num_layers=2, num_heads=3,
             out_indices=(0, 1))


def castling(**options):
    torch.manual_seed(0)
    return MODELS.build(dict(type='CastlingViT', **SMALL, **options))


@pytest.mark.parametrize('options', [
    dict(), dict(with_cls_token=False),
    dict(attn_cfg=dict(type='LinearAngularAttention', conv='spatial', kernel_size=3)),
    dict(attn_cfg=dict(type='RWGKAttention', anchor_mode='pooled', num_anchors=4)),
    dict(attn_cfg=dict(type='SoftmaxAttention')),
])
@pytest.mark.parametrize('size', [(64, 64), (80, 48)])
def test_shapes(options, size):
    model = castling(**options)
    model.init_weights()
    outs = model(torch.randn(2, 3, *size))
    assert [o.shape for o in outs] == [(2, 96, size[0] // 16, size[1] // 16)] * 2


def test_parameters_are_stock_vit_b_plus_the_depthwise_convs():
    vit_b = dict(img_size=(224, 224), patch_size=16, embed_dims=768, num_layers=12, num_heads=12)
    stock = sum(p.numel() for p in VisionTransformer(**vit_b).parameters())
    ours = sum(p.numel() for p in MODELS.build(dict(type='CastlingViT', **vit_b)).parameters())
    assert ours - stock == 12 * 12 * 9  # one (9, 1) depthwise kernel per head and layer
    assert abs(ours / 1e6 - 85.8) < 0.05


def test_softmax_attention_rebuilds_stock_vit():
    torch.manual_seed(0)
    stock = VisionTransformer(**SMALL).double()
    ours = castling(attn_cfg=dict(type='SoftmaxAttention')).double()
    stock.eval()  # mmseg's ViT.train() returns None, so no chaining
    ours.eval()
    renamed = {k.replace('attn.attn.in_proj_',
                         'attn.attn.qkv.').replace('attn.attn.out_proj.', 'attn.attn.proj.'): v
               for k, v in stock.state_dict().items()}
    ours.load_state_dict(renamed)
    x = torch.randn(1, 3, 64, 64, dtype=torch.float64)
    for a, b in zip(stock(x), ours(x)):
        torch.testing.assert_close(a, b)


def test_switch_to_deploy_removes_every_auxiliary_branch():
    model = castling()
    model.eval()
    x = torch.randn(1, 3, 64, 64)
    for layer in model.layers:
        layer.attn.attn.aux_weight.fill_(0.0)
    faded = model(x)
    for layer in model.layers:
        layer.attn.attn.switch_to_deploy()
    assert not any(layer.attn.attn.has_aux_branch for layer in model.layers)
    for a, b in zip(faded, model(x)):
        torch.testing.assert_close(a, b)


def timm_state_dict(embed_dims=96, layers=2, tokens=17):
    """Random weights under timm's ViT names and shapes, plus a head and an fc_norm to drop."""
    hidden = 4 * embed_dims
    sd = {'cls_token': torch.randn(1, 1, embed_dims),
          'pos_embed': torch.randn(1, tokens, embed_dims),
          'patch_embed.proj.weight': torch.randn(embed_dims, 3, 16, 16),
          'patch_embed.proj.bias': torch.randn(embed_dims),
          'norm.weight': torch.randn(embed_dims), 'norm.bias': torch.randn(embed_dims),
          'fc_norm.weight': torch.randn(embed_dims), 'head.weight': torch.randn(1000, embed_dims)}
    for i in range(layers):
        for name, shape in (('norm1', (embed_dims,)), ('norm2', (embed_dims,)),
                            ('attn.qkv', (3 * embed_dims, embed_dims)),
                            ('attn.proj', (embed_dims, embed_dims)),
                            ('mlp.fc1', (hidden, embed_dims)), ('mlp.fc2', (embed_dims, hidden))):
            sd[f'blocks.{i}.{name}.weight'] = torch.randn(*shape)
            sd[f'blocks.{i}.{name}.bias'] = torch.randn(shape[0])
    return sd


def small_config(tmp_path):
    """A config whose backbone is the small CastlingViT with timm's patch bias and final norm."""
    config = tmp_path / 'castling_small.py'
    backbone = dict(type='CastlingViT', **SMALL, patch_bias=True, final_norm=True)
    config.write_text(f"default_scope = 'mmseg'\nmodel = dict(backbone={backbone!r})\n")
    return config


def test_timm_converter_then_init_cfg(tmp_path):
    config = small_config(tmp_path)
    weights = timm_state_dict()
    torch.save({'model': weights}, tmp_path / 'mae.pth')
    done = run_tool(['tools/model_converters/vit2mmvisattn.py', tmp_path / 'mae.pth',
                     tmp_path / 'out.pth', '--config', config], cwd=tmp_path)
    assert 'dropped 2: fc_norm.weight, head.weight' in done.stdout
    assert (
        'newly initialised in the backbone (2): layers.0.attn.attn.dconv.weight, '
        'layers.1.attn.attn.dconv.weight'
        in done.stdout
    )
    model = castling(patch_bias=True, final_norm=True,
                     init_cfg=dict(type='Pretrained', checkpoint=str(tmp_path / 'out.pth')))
    model.init_weights()
    torch.testing.assert_close(model.layers[1].attn.attn.qkv.weight,
                               weights['blocks.1.attn.qkv.weight'])


def test_timm_converter_names_a_checkpoint_of_another_width(tmp_path):
    config = small_config(tmp_path)
    torch.save(timm_state_dict(embed_dims=192), tmp_path / 'wide.pth')
    done = run_tool(['tools/model_converters/vit2mmvisattn.py', tmp_path / 'wide.pth',
                     tmp_path / 'out.pth', '--config', config], cwd=tmp_path, check=False)
    assert done.returncode == 1
    assert '(a checkpoint of another width?)' in done.stderr.strip().splitlines()[-1]


def test_convert_keeps_every_block_tensor():
    converted, dropped = convert_vit_state_dict(timm_state_dict())
    assert sorted(dropped) == ['fc_norm.weight', 'head.weight']
    assert ('layers.1.ffn.layers.0.0.weight' in converted
            and 'patch_embed.projection.bias' in converted)
