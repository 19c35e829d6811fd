"""One contract for every registered backbone, checked registry-wide in timm's manner
(``mmvisattn/models/backbones/contract.py``): each builds from the mmdet registry, any subset of
``out_indices`` returns a tuple of contiguous maps with the declared channels and strides (odd input
sizes included), frozen stages receive no gradient and stay in eval mode, ``norm_eval`` keeps the
norm layers in eval mode, activation checkpointing changes nothing but the memory, and bad arguments
fail in one line naming the backbone."""
import math

import pytest
import torch
from mmdet.registry import MODELS

from mmvisattn.models import backbones
from mmvisattn.models.backbones.contract import NORM_LAYERS

from ...conftest import REPO, saved_elements

# A small model of every registered backbone: (config, number of stages).
CASES = {
    'ViL': (dict(arch=dict(embed_dims=(16, 16, 24, 24), depths=(1, 1, 1, 1), num_heads=(1, 1, 2, 2),
                           patch_sizes=(4, 2, 2, 2), windows=(2, 2, 2, 2), num_global=(1, 1, 1, 0)),
                 drop_path_rate=0.0), 4),
    'PerViT': (dict(arch=dict(num_heads=2, depths=(1, 1, 1, 1), embed_dims=(16, 16, 24, 24),
                              stem_channels=(8, 8, 8, 16))), 4),
    'ESNet': (dict(arch='s'), 3), 'CastlingLeViT': (dict(arch='s'), 3),
    'CastlingViT': (dict(img_size=(64, 64), patch_size=16, embed_dims=32, num_layers=3, num_heads=2,
                         final_norm=True), 3),
    'DeiTRipple': (dict(img_size=(64, 64), patch_size=16, embed_dims=24, num_layers=3, num_heads=2,
                        num_ripple_layers=2, drop_path_rate=0.0), 3),
    'MixVisionTransformerRWGKA': (dict(embed_dims=8, num_layers=(1, 1, 1, 1),
                                       num_heads=(1, 1, 2, 2),
                                       attn_cfg=dict(type='RWGKAttention', num_anchors=4)), 4),
}
IMAGE = (2, 3, 67, 93)  # odd sides: every stride rounds up


def build(name: str, **options):
    torch.manual_seed(0)
    config, _ = CASES[name]
    return MODELS.build(dict(type=name, **config, **options))


def test_every_registered_backbone_has_a_case():
    assert set(CASES) == set(backbones.__all__)


@pytest.mark.parametrize('name', CASES)
def test_outputs_have_the_declared_channels_and_strides_for_any_out_indices(name):
    stages = CASES[name][1]
    for out_indices in [tuple(range(stages)), (stages - 1,), (0, -1), (-1, 0), -1]:
        model = build(name, out_indices=out_indices).eval()
        with torch.no_grad():
            outs = model(torch.randn(IMAGE))
        assert isinstance(outs,
                          tuple) and len(outs) == len(model.out_indices) == len(model.out_channels)
        assert list(model.out_indices) == sorted(model.out_indices)
        for out, channels, stride in zip(outs, model.out_channels, model.out_strides):
            assert tuple(out.shape) == (IMAGE[0], channels, math.ceil(IMAGE[2] / stride),
                                        math.ceil(IMAGE[3] / stride))
            # mmcv's C++ ops (RoIAlign of every two-stage head) read their input's memory as
            # contiguous NCHW
            assert out.is_contiguous()


def trained_parameters(model) -> set:
    """Names of the parameters a training step's backward reaches."""
    model.train()
    sum(out.sum() for out in model(torch.randn(IMAGE))).backward()
    return {name for name, param in model.named_parameters() if param.grad is not None}


def parameters_of(parts) -> dict:
    """``{id: parameter}`` of stem or stage parts (modules and bare parameters)."""
    return {id(p): p for part in parts
            for p in ([part] if isinstance(part, torch.nn.Parameter) else part.parameters())}


def reduced_out_indices(name: str) -> tuple:
    """The stages before the last: the outputs a detector's neck may take, leaving the last stage
    out."""
    return tuple(range(CASES[name][1] - 1))


@pytest.mark.parametrize('with_cp', [False, True], ids=['plain', 'with_cp'])
@pytest.mark.parametrize('name', CASES)
def test_every_trainable_parameter_gets_a_gradient_whatever_out_indices(name, with_cp):
    """What DDP's default (``find_unused_parameters=False``) needs: the stages after the last output
    are not built, so a loss on the outputs reaches every parameter that requires a gradient."""
    full, reduced = build(name), build(name, out_indices=reduced_out_indices(name), with_cp=with_cp)
    assert sum(p.numel() for p in reduced.parameters()) < sum(p.numel() for p in full.parameters())
    trainable = {name for name, param in reduced.named_parameters() if param.requires_grad}
    assert trainable and trained_parameters(reduced) == trainable


@pytest.mark.parametrize('name', CASES)
def test_checkpointing_is_non_reentrant(name, monkeypatch):
    """The reentrant checkpoint breaks under DDP with ``find_unused_parameters=True``; mmseg's
    layers, which MiT-RWGKA, CastlingViT and DeiTRipple inherit, take it by default."""
    calls = []
    checkpoint = torch.utils.checkpoint.checkpoint

    def recorded(*args, **kwargs):
        calls.append(kwargs.get('use_reentrant'))
        return checkpoint(*args, **kwargs)
    monkeypatch.setattr(torch.utils.checkpoint, 'checkpoint', recorded)
    trained_parameters(build(name, with_cp=True))
    assert calls and set(calls) == {False}, calls


@pytest.mark.parametrize('name', CASES)
def test_frozen_stages_get_no_gradient_and_stay_in_eval_mode(name):
    stages = CASES[name][1]
    model = build(name, frozen_stages=1, out_indices=tuple(range(stages)))
    frozen = model.stem_parts() + model.stage_parts(0)
    reached = trained_parameters(model)
    names = {id(param): name for name, param in model.named_parameters()}
    assert parameters_of(frozen) and not {names[i] for i in parameters_of(frozen)} & reached
    assert reached  # the later stages still learn
    assert not any(module.training for part in frozen if isinstance(part, torch.nn.Module)
                   for module in part.modules())
    stem_only = build(name, frozen_stages=0, out_indices=tuple(range(stages)))
    stem = parameters_of(stem_only.stem_parts())
    assert stem and not any(p.requires_grad for p in stem.values())
    stage = parameters_of(stem_only.stage_parts(0))
    assert all(p.requires_grad for key, p in stage.items() if key not in stem)


@pytest.mark.parametrize('name', CASES)
def test_norm_eval_keeps_the_norm_layers_in_eval_mode(name):
    model = build(name, norm_eval=True).train()
    norms = [module for module in model.modules() if isinstance(module, NORM_LAYERS)]
    assert norms and not any(norm.training for norm in norms)
    assert build(name).train().training


@pytest.mark.parametrize('name', CASES)
def test_checkpointing_changes_the_memory_only(name):
    plain, recomputed = build(name), build(name, with_cp=True)
    recomputed.load_state_dict(plain.state_dict())
    image = torch.randn(IMAGE)
    results = []
    for model in (plain, recomputed):
        model.train()
        kept = saved_elements(lambda: results.append(model(image)))  # noqa: B023
        sum(out.square().mean() for out in results[-1]).backward()
        results.append((kept, [p.grad for p in model.parameters()]))
    (outs_plain,
     (kept_plain, grads_plain)), (outs_cp, (kept_cp, grads_cp)) = zip(results[::2], results[1::2])
    for a, b in zip([*outs_plain, *grads_plain], [*outs_cp, *grads_cp]):
        torch.testing.assert_close(a, b)
    assert kept_cp < kept_plain, (kept_cp, kept_plain)


@pytest.mark.parametrize('name', CASES)
def test_bad_contract_arguments_fail_naming_the_backbone(name):
    stages = CASES[name][1]
    with pytest.raises(
        ValueError, match=f'^{name}: out_indices={stages}; expected stage indices below {stages}'
    ):
        build(name, out_indices=stages)
    with pytest.raises(ValueError, match=f'^{name}: out_indices=\\(0, 0\\)'):
        build(name, out_indices=(0, 0))
    with pytest.raises(ValueError, match=f'^{name}: frozen_stages={stages + 1}; expected -1'):
        build(name, frozen_stages=stages + 1)


# (backbone, the plug-in guide's arch cell, the config that builds it)
GUIDE_ARCHS = [
    *[('ViL', f'`{arch}`', dict(arch=arch)) for arch in ('tiny', 'small', 'medium', 'base')],
    *[('PerViT', f'`{arch}`', dict(arch=arch)) for arch in ('tiny', 'small', 'medium')],
    *[(name, f'`{arch}`',
       dict(arch=arch)) for name in ('ESNet', 'CastlingLeViT') for arch in ('s', 'm', 'l')],
    ('MixVisionTransformerRWGKA', 'B0: `embed_dims=32, num_heads=[1, 2, 5, 8]`',
     dict(embed_dims=32, num_heads=[1, 2, 5, 8], num_layers=[2, 2, 2, 2])),
    ('MixVisionTransformerRWGKA', 'B1-B5: `embed_dims=64, num_heads=[1, 2, 5, 8]`',
     dict(embed_dims=64, num_heads=[1, 2, 5, 8], num_layers=[2, 2, 2, 2])),
    ('CastlingViT', 'ViT-B/16: `embed_dims=768, num_layers=12, out_indices=(3, 5, 7, 11)`',
     dict(embed_dims=768, num_layers=12, num_heads=12, out_indices=(3, 5, 7, 11))),
    ('DeiTRipple', 'DeiT-Tiny (defaults)', {}),
]


def test_the_plug_in_guides_table_of_stage_widths_is_what_the_backbones_build():
    readme = (REPO / 'docs/user_guides/plug_in.md').read_text()
    for name, arch, cfg in GUIDE_ARCHS:
        model = MODELS.build(dict(type=name, **cfg))
        row = (f"| {name} | {arch} | {', '.join(map(str, model.out_channels))} | "
               f"{', '.join(map(str, model.out_strides))} | `{tuple(model.out_indices)}` |")
        assert row in readme, row
