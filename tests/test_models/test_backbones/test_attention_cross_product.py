"""Every registered attention in every registered backbone that takes one (the extra-token contract
of ``mmvisattn/models/attentions/base.py``): found from the registries, swapped in through the
backbone's ``attention_args`` with nothing but ``type`` set, each pair builds, returns the default
model's shapes, gives every trainable parameter a finite gradient, and runs after
``switch_to_deploy()`` in eval mode."""
import itertools

import pytest
import torch
from mmdet.registry import MODELS

from mmvisattn.models.attentions import SpatialReductionAttention
from mmvisattn.registry import ATTENTIONS

from .test_contract import CASES

ATTENTION_TYPES = sorted(ATTENTIONS.module_dict)
IMAGE = (2, 3, 48, 64)
# the other count of extra tokens of the backbones that may have a class token
VARIANTS = {'CastlingViT without a class token': ('CastlingViT', dict(with_cls_token=False)),
            'DeiTRipple with a class token': ('DeiTRipple', dict(with_cls_token=True))}


def attention_backbones():
    """The registered backbones of the project that hold attentions (a non-empty
    ``attention_args``)."""
    return sorted(name for name, cls in MODELS.module_dict.items()
                  if cls.__module__.startswith('mmvisattn.') and getattr(cls, 'attention_args', ()))


def models():
    """Each backbone by its name, and the variants."""
    return {**{name: (name, {}) for name in attention_backbones()}, **VARIANTS}


def build(label: str, attn_type=None):
    name, options = models()[label]
    config = dict(CASES[name][0], **options)
    if attn_type is not None:
        config.update({arg: dict(type=attn_type) for arg in MODELS.get(name).attention_args})
    torch.manual_seed(0)
    return MODELS.build(dict(type=name, **config))


def test_every_attention_backbone_has_a_small_case():
    names = attention_backbones()
    assert {'ViL', 'PerViT', 'CastlingLeViT', 'CastlingViT', 'DeiTRipple',
            'MixVisionTransformerRWGKA'} <= set(names)
    missing = [name for name in names if name not in CASES]
    assert not missing, f'add a small model of {missing} to test_contract.CASES'


@pytest.fixture(scope='module')
def default_shapes():
    torch.manual_seed(0)
    images = torch.randn(IMAGE)
    with torch.no_grad():
        return {label: [out.shape for out in build(label).eval()(images)] for label in models()}


@pytest.mark.parametrize('backbone,attn_type', itertools.product(models(), ATTENTION_TYPES))
def test_attention_in_backbone(backbone, attn_type, default_shapes):
    model = build(backbone, attn_type).train()
    torch.manual_seed(1)
    images = torch.randn(IMAGE)
    outs = model(images)
    assert [out.shape for out in outs] == default_shapes[backbone]
    sum(out.square().mean() for out in outs).backward()
    missing = [
        name
        for name, param in model.named_parameters()
        if param.requires_grad and param.grad is None
    ]
    assert not missing, f'{attn_type} in {backbone}: no gradient for {missing}'
    nonfinite = [name for name, param in model.named_parameters()
                 if param.grad is not None and not torch.isfinite(param.grad).all()]
    assert not nonfinite, f'{attn_type} in {backbone}: non-finite gradient for {nonfinite}'
    model.switch_to_deploy()
    with torch.no_grad():
        outs = model.eval()(images)
    assert [out.shape for out in outs] == default_shapes[backbone]
    assert all(torch.isfinite(out).all() for out in outs)


@pytest.mark.parametrize('backbone', attention_backbones())
def test_spatial_reduction_keeps_a_grid_of_keys_on_every_stage(backbone):
    """The stage settings offered keep ``REDUCED_KEY_STRIDE`` keys: a 128x128 image leaves every
    query at least a 4x4 grid of keys, on every map (an unoffered ``sr_ratio=8`` leaves one key
    below 16x16)."""
    model = build(backbone, 'SpatialReductionAttention').eval()
    grids = []
    for attn in model.modules():
        if isinstance(attn, SpatialReductionAttention):
            attn.register_forward_pre_hook(lambda attn, args: grids.append(
                (args[1][0] // attn.sr_ratio) * (args[1][1] // attn.sr_ratio)))
    with torch.no_grad():
        model(torch.randn(1, 3, 128, 128))
    assert grids and min(grids) >= 16, grids
