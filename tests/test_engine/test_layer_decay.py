"""Layer-wise learning-rate decay: every backbone answers mmpretrain's ``get_layer_depth``,
mmpretrain's own constructor takes it in a
classifier, :class:`BackboneLayerDecayOptimWrapperConstructor` in a detector or a segmentor, and the
MAE-initialised Mask2Former configs decay by layer as MAE's recipe does."""
import pytest
import torch
from mmengine.config import Config, ConfigDict
from mmengine.optim import build_optim_wrapper
from mmengine.registry import init_default_scope

from mmvisattn.registry import build_from_config

from ..conftest import REPO, run_tool
from ..test_models.test_backbones.test_contract import CASES, build, parameters_of

LR, RATE = 1e-3, 0.5
DECAY = dict(optimizer=dict(type='AdamW', lr=LR, weight_decay=0.05),
             constructor='BackboneLayerDecayOptimWrapperConstructor',
             paramwise_cfg=dict(layer_decay_rate=RATE))


class Detector(torch.nn.Module):
    """A backbone and a head, as mmdet's and mmseg's models hold them."""

    def __init__(self, backbone: torch.nn.Module) -> None:
        super().__init__()
        self.backbone, self.head = backbone, torch.nn.Linear(2, 2)


def learning_rates(model: torch.nn.Module, cfg: dict) -> dict:
    """``{parameter name: learning rate}`` of the optimizer built from ``cfg``."""
    names = {id(param): name for name, param in model.named_parameters()}
    groups = build_optim_wrapper(model, ConfigDict(cfg)).optimizer.param_groups
    return {names[id(param)]: group['lr'] for group in groups for param in group['params']}


@pytest.mark.parametrize('name', CASES)
def test_each_stage_learns_at_its_depths_rate(name):
    model = Detector(build(name))
    backbone, stages = model.backbone, CASES[name][1]
    count = stages + 2
    assert backbone.get_layer_depth('head.weight', 'backbone.') == (count - 1, count)
    rates = learning_rates(model, DECAY)
    assert rates['head.weight'] == LR
    names = {id(param): name for name, param in model.named_parameters()}
    stem = parameters_of(backbone.stem_parts())
    for depth, parts in enumerate([backbone.stem_parts()]
                                  + [backbone.stage_parts(i) for i in range(stages)]):
        expected = LR * RATE ** (count - depth - 1)
        within = [names[key] for key in parameters_of(parts) if depth == 0 or key not in stem]
        assert within and all(rates[n] == pytest.approx(expected) for n in within), (
            depth,
            within[:3],
        )


def test_a_backbone_without_depths_is_one_line():
    model = Detector(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError,
                       match='^BackboneLayerDecayOptimWrapperConstructor: Linear has no '
                       'get_layer_depth'):
        learning_rates(model, DECAY)


def test_mmpretrains_constructor_decays_a_classifier_of_the_project():
    cfg = Config.fromfile(REPO / 'configs/smca/deit-ripple-demo_1xb32-300i_shapes-imagenet-64.py')
    model = build_from_config(cfg)
    rates = learning_rates(model,
                           dict(DECAY, constructor='LearningRateDecayOptimWrapperConstructor'))
    assert (
        len(set(rates.values())) == model.backbone.get_layer_depth('head.fc.weight', 'backbone.')[1]
    )


def test_the_mae_mask2former_config_decays_by_layer():
    """MAE's recipe at mmseg's ADE20K rate: 14 learning rates, the embeddings at lr * 0.65 ** 13,
    the last layer at lr * 0.65, the pixel decoder and the heads at lr."""
    cfg = Config.fromfile(REPO / 'configs/castling/mask2former_vit-b_8xb2-160k_ade20k-512x512.py')
    init_default_scope(cfg.default_scope)
    rates = learning_rates(build_from_config(cfg), cfg.optim_wrapper)
    lr = cfg.optim_wrapper.optimizer.lr
    assert len(set(rates.values())) == 14
    assert rates['backbone.pos_embed'] == pytest.approx(lr * 0.65 ** 13)
    assert rates['backbone.layers.0.ffn.layers.1.weight'] == pytest.approx(lr * 0.65 ** 12)
    assert rates['backbone.layers.11.ffn.layers.1.weight'] == pytest.approx(lr * 0.65)
    assert all(rate == lr for name, rate in rates.items() if not name.startswith('backbone.'))


def test_a_demo_trains_with_layer_decay(workspace, tmp_path):
    done = run_tool(['tools/train.py',
                     REPO / 'configs/vil/retinanet_vil-demo_fpn_1xb8-600i_shapes-coco-128.py',
                     '--work-dir', tmp_path, '--cfg-options',
                     'optim_wrapper.constructor=' + DECAY['constructor'],
                     'optim_wrapper.paramwise_cfg.layer_decay_rate=0.7', 'train_cfg.max_iters=2',
                     'train_dataloader.batch_size=2', 'val_cfg=None', 'val_dataloader=None',
                     'val_evaluator=None'],
                    cwd=workspace)
    assert (tmp_path / 'iter_2.pth').exists(), done.stdout[-2000:]
