"""Every config of the project parses, builds its model in its own scope and takes one loss step
on a small synthetic batch (configs whose models differ only in what a step here does not see, the
schedule's drop-path rate or the input size, share one step); the base configs point at the stock
dataset layouts."""
import functools
import json
from pathlib import Path
from typing import Dict, List

import pytest
import torch
from mmengine.config import Config
from mmengine.registry import init_default_scope

from mmvisattn.registry import models_of_scope, with_data_preprocessor

from .conftest import MODEL_CONFIGS, REPO

CONFIGS = MODEL_CONFIGS
BASES = sorted((REPO / 'configs' / '_base_').rglob('*.py'))


# the test batch: the smallest images every config's strides and windows take (64 = 2 tokens at
# stride 32)
DETECTION_SIZE, SEGMENTATION_SIZE, CLASSIFICATION_SIZE = (64, 96), (64, 64), (64, 64)


def detection_batch(size=DETECTION_SIZE, num_classes=3, with_mask=False):
    from mmdet.structures import DetDataSample
    from mmdet.structures.mask import BitmapMasks
    from mmengine.structures import InstanceData
    samples = []
    for i in range(2):
        instances = InstanceData(bboxes=torch.tensor([[5.0, 7.0, 33.0, 40.0],
                                                      [40.0, 13.0, 60.0, 47.0]]),
                                 labels=torch.tensor([i % num_classes, (i + 1) % num_classes]))
        if with_mask:
            masks = torch.zeros(2, *size, dtype=torch.uint8)
            masks[0, 7:40, 5:33] = 1
            masks[1, 13:47, 40:60] = 1
            instances.masks = BitmapMasks(masks.numpy(), *size)
        samples.append(DetDataSample(gt_instances=instances, metainfo=dict(
            img_shape=size, ori_shape=size, pad_shape=size, batch_input_shape=size,
            scale_factor=(1.0, 1.0))))
    return dict(inputs=[torch.randint(0, 255, (3, *size), dtype=torch.uint8) for _ in range(2)],
                data_samples=samples)


def segmentation_batch(size=SEGMENTATION_SIZE, num_classes=4):
    from mmengine.structures import PixelData
    from mmseg.structures import SegDataSample
    samples = [SegDataSample(gt_sem_seg=PixelData(data=torch.randint(0, num_classes, (1, *size))),
                             metainfo=dict(img_shape=size, ori_shape=size,
                                           pad_shape=size)) for _ in range(2)]
    return dict(inputs=[torch.randint(0, 255, (3, *size), dtype=torch.uint8) for _ in range(2)],
                data_samples=samples)


def classification_batch(size=CLASSIFICATION_SIZE, num_classes=1000):
    from mmpretrain.structures import DataSample

    samples = [
        DataSample(metainfo=dict(img_shape=size)).set_gt_label(7 * i % num_classes)
        for i in range(2)
    ]
    return dict(inputs=[torch.randint(0, 255, (3, *size), dtype=torch.uint8) for _ in range(2)],
                data_samples=samples)


def without_unavailable_weights(cfg: Config) -> Config:
    """Pretrained weights cannot be downloaded here: a backbone whose checkpoint is absent starts
    from its own initialisation (tests/test_tools/test_model_converters.py loads converted ones)."""
    backbone = cfg.model.get('backbone', {})
    init_cfg = backbone.get('init_cfg') or {}
    if init_cfg.get('type') == 'Pretrained':
        assert init_cfg['checkpoint'].startswith(('pretrain/', 'torchvision://',
                                                  'https://')), init_cfg
        if not Path(init_cfg['checkpoint']).exists():
            backbone.init_cfg = None
    return cfg


def model_and_batch(path: Path):
    """The config's model (initialised, in training mode) and a small synthetic batch for it."""
    cfg = without_unavailable_weights(Config.fromfile(path))
    assert cfg.default_scope in ('mmdet', 'mmseg', 'mmpretrain')
    init_default_scope(cfg.default_scope)
    with_data_preprocessor(cfg)
    # pad the small test batch, not to the crop size
    if cfg.model.get('data_preprocessor', {}).get('size'):
        cfg.model.data_preprocessor.size = (DETECTION_SIZE if cfg.default_scope == 'mmdet'
                                            else SEGMENTATION_SIZE)
    if cfg.model.get('data_preprocessor', {}).get('batch_augments'):
        # no multi-scale resize of the small test batch
        cfg.model.data_preprocessor.batch_augments = None
    if cfg.default_scope == 'mmdet':
        batch = detection_batch(num_classes=cfg.model.get('bbox_head', {}).get('num_classes', 3),
                                with_mask=bool(cfg.model.get('roi_head', {}).get('mask_head')))
    elif cfg.default_scope == 'mmpretrain':
        batch = classification_batch(num_classes=cfg.model.head.num_classes)
    else:
        batch = segmentation_batch(num_classes=cfg.model.decode_head.num_classes)
    model = models_of_scope(cfg.default_scope).build(cfg.model)
    model.init_weights()
    return model.train(), batch


# model keys a loss step on the test batch does not see: the rate of the stochastic depth (the same
# code at another probability, e.g. ViL's 1x and 3x schedules) and the pretrained weights (absent
# here)
UNSEEN_BY_A_STEP = ('drop_path_rate', 'init_cfg')
# the data preprocessor's keys that model_and_batch replaces (the input sizes of PicoDet's
# 320/416/640)
REPLACED_BY_THE_TEST = ('size', 'batch_augments')


@functools.lru_cache(maxsize=None)  # each config parsed once: at collection, for the grouping
def model_structure(path: Path) -> str:
    """The config's model without :data:`UNSEEN_BY_A_STEP` and :data:`REPLACED_BY_THE_TEST`, as
    canonical JSON."""
    def strip(node):
        if isinstance(node, dict):
            return {key: strip(value) for key, value in node.items() if key not in UNSEEN_BY_A_STEP}
        return [strip(value) for value in node] if isinstance(node, (list, tuple)) else node
    model = Config.fromfile(path).model.to_dict()
    for key in REPLACED_BY_THE_TEST:
        model.get('data_preprocessor', {}).pop(key, None)
    return json.dumps(strip(model), sort_keys=True, default=str)


def same_structures(paths: List[Path]) -> Dict[str, List[Path]]:
    """``{structure: configs}`` in the order of ``paths``: the first config of each group takes the
    step."""
    groups: Dict[str, List[Path]] = {}
    for path in paths:
        groups.setdefault(model_structure(path), []).append(path)
    return groups


STEP_GROUPS = list(same_structures(CONFIGS).values())


def group_id(group: List[Path]) -> str:
    first = str(group[0].relative_to(REPO / 'configs'))
    return first if len(group) == 1 else f'{first}+{len(group) - 1}'


def test_grouped_configs_differ_from_their_first_only_in_what_a_step_does_not_see():
    """The grouping is not a loophole: every config belongs to exactly one group, within a group the
    models are equal once those keys go, and a group holds one model name (its first two fields,
    e.g. ``mask-rcnn_vil-small``) at several schedules or input sizes."""
    assert sorted(path for group in STEP_GROUPS for path in group) == CONFIGS
    for group in STEP_GROUPS:
        assert len({model_structure(path) for path in group}) == 1
        assert len({tuple(path.name.split('_')[:2]) for path in group}) == 1, group
    assert len(STEP_GROUPS) < len(CONFIGS)


@pytest.mark.parametrize('group', STEP_GROUPS, ids=group_id)
def test_config_builds_and_takes_a_loss_step(group: List[Path]):
    model, batch = model_and_batch(group[0])
    data = model.data_preprocessor(batch, training=True)
    losses = model.loss(data['inputs'], data['data_samples'])
    total, _ = model.parse_losses(losses)
    assert torch.isfinite(total)
    total.backward()


@pytest.mark.parametrize('path', [p for p in CONFIGS if 'shapes' in p.name],
                         ids=lambda p: str(p.relative_to(REPO / 'configs')))
def test_demo_config_trains_under_cpu_amp(path: Path):
    """Two optimiser steps under the wrapper that ``tools/train.py --amp`` picks on CPU (bfloat16
    autocast): every loss stays finite, the second one after an update of the weights."""
    from mmengine.optim import build_optim_wrapper
    torch.manual_seed(0)
    model, batch = model_and_batch(path)
    wrapper = build_optim_wrapper(model, dict(type='CPUAmpOptimWrapper',
                                              optimizer=dict(type='AdamW', lr=1e-4)))
    for _ in range(2):
        log_vars = model.train_step(batch, wrapper)
        assert all(torch.isfinite(torch.as_tensor(value)).all() for value in log_vars.values()), (
            log_vars
        )


@pytest.mark.parametrize('path', BASES, ids=lambda p: str(p.relative_to(REPO / 'configs')))
def test_base_configs_parse(path: Path):
    cfg = Config.fromfile(path)
    roots = [cfg[name].dataset.get('data_root') for name in ('train_dataloader', 'test_dataloader')
             if name in cfg]
    expected_roots = {'coco': 'data/coco/', 'cityscapes': 'data/cityscapes/',
                      'ade20k': 'data/ade/ADEChallengeData2016'}
    if 'datasets' in path.parts and not path.name.startswith('demo_'):
        expected = expected_roots[next(k for k in expected_roots if k in path.name)]
        assert roots and all(root == expected for root in roots)
    if 'schedules' in path.parts:
        assert cfg.train_cfg and cfg.param_scheduler


@pytest.mark.parametrize('folder', sorted({p.parent for p in CONFIGS}), ids=lambda p: p.name)
def test_config_folders_document_every_config(folder: Path):
    import yaml
    assert (folder / 'README.md').is_file()
    metafile = yaml.safe_load((folder / 'metafile.yml').read_text())
    listed = {model['Config'] for model in metafile['Models']}
    on_disk = {str(p.relative_to(REPO)) for p in folder.glob('*.py')}
    assert listed == on_disk


def test_demo_configs_log_the_loss_in_a_short_run():
    """A run of a few tens of iterations (the tests', a first try) shows the loss: the shapes
    configs log at least every 10 iterations."""
    intervals = {path.name: Config.fromfile(path).default_hooks.logger.interval for path in CONFIGS
                 if 'shapes' in path.name}
    assert intervals and max(intervals.values()) <= 10, intervals
