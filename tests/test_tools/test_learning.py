"""Short learning checks through the stock tools: a demo config trained for a minute beats the
untrained model on the shapes data. Longer runs and their figures: `make demo` and the READMEs."""
import re

import torch
from mmengine.config import Config
from mmengine.registry import init_default_scope

import mmvisattn  # noqa: F401
from mmvisattn.registry import models_of_scope

from ..conftest import REPO, run_tool

SEG_SMALL = """
_base_ = {base!r}
size = (64, 64)
train_pipeline = [dict(type='LoadImageFromFile'), dict(type='LoadAnnotations'),
                  dict(type='Resize', scale=size, keep_ratio=True),
                  dict(type='RandomFlip', prob=0.5),
                  dict(type='PackSegInputs')]
test_pipeline = [dict(type='LoadImageFromFile'), dict(type='Resize', scale=size, keep_ratio=True),
                 dict(type='LoadAnnotations'), dict(type='PackSegInputs')]
model = dict(data_preprocessor=dict(size=size))
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader
train_cfg = dict(max_iters={iters}, val_interval={iters})
param_scheduler = [dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=20)]
randomness = dict(seed=0)
"""


# Box-only pipelines resized to a template's ``size``, for the short detection runs.
DET_PIPELINES = """
train_pipeline = [dict(type='LoadImageFromFile'), dict(type='LoadAnnotations', with_bbox=True),
                  dict(type='Resize', scale=size, keep_ratio=True),
                  dict(type='RandomFlip', prob=0.5),
                  dict(type='PackDetInputs')]
test_pipeline = [dict(type='LoadImageFromFile'), dict(type='Resize', scale=size, keep_ratio=True),
                 dict(type='LoadAnnotations', with_bbox=True),
                 dict(type='PackDetInputs',
                      meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor'))]
"""

DET_SMALL = """
_base_ = {base!r}
size = (64, 64)
""" + DET_PIPELINES + """model = dict(data_preprocessor=dict(batch_augments=None))
train_dataloader = dict(batch_size=8, dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader
train_cfg = dict(max_iters={iters}, val_interval={iters})
param_scheduler = [dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=20)]
default_hooks = dict(checkpoint=dict(interval={iters}))
randomness = dict(seed=0)
"""


def untrained_checkpoint(config, path):
    cfg = Config.fromfile(config)
    init_default_scope(cfg.default_scope)
    torch.manual_seed(0)
    model = models_of_scope(cfg.default_scope).build(cfg.model)
    model.init_weights()
    torch.save({'state_dict': model.state_dict(), 'meta': {}}, path)


def metric(output: str, name: str) -> float:
    """The last value of ``name`` in a tool's log; 0 when mmdet's COCO metric had no detection
    at all to score (an untrained detector whose scores all fall below the threshold)."""
    values = re.findall(rf'{name}: ([0-9.]+)', output)
    if not values and 'The testing results of the whole dataset is empty' in output:
        return 0.0
    return float(values[-1])


def assert_learned(untrained: float, trained: float, margin: float, floor: float = 0.0) -> None:
    """The trained model's metric at least ``margin`` above the untrained model's and ``floor``
    (chance, the all-background prediction). The runs are seeded (``randomness`` above,
    ``untrained_checkpoint``); each margin is at most half the smallest gain measured over seeds 0
    to 2 or 3, so the seed does not decide the outcome."""
    assert trained >= max(untrained, floor) + margin, (untrained, trained)


def before_and_after(workspace, tmp_path, template: str, base: str, iters: int, name: str):
    """The metric of the untrained model and after ``iters`` iterations of training."""
    config = tmp_path / 'small.py'
    config.write_text(template.format(base=str(REPO / base), iters=iters))
    untrained_checkpoint(config, tmp_path / 'untrained.pth')
    before = run_tool(['tools/test.py', config, tmp_path / 'untrained.pth', '--work-dir',
                       tmp_path / 'before'],
                      cwd=workspace)
    trained = run_tool(['tools/train.py', config, '--work-dir', tmp_path / 'train'], cwd=workspace)
    return metric(before.stdout + before.stderr,
                  name), metric(trained.stdout + trained.stderr, name)


ALL_BACKGROUND_MIOU = 22.66  # background IoU 90.6 / 4 classes on the validation split
MIOU_MARGIN = 1.0
AP50_MARGIN = 0.004


def test_segformer_rwgka_demo_learns(workspace, tmp_path):
    """200 iterations at 64x64: the RWGKA SegFormer-B0 separates the shapes from the background (an
    mIoU above the all-background prediction's; fewer iterations stay at or just above it)."""
    untrained, trained = before_and_after(
        workspace, tmp_path, SEG_SMALL,
        'configs/segformer_rwgka/segformer_mit-b0-rwgka_1xb8-600i_shapes-cityscapes-128.py', 200,
        'mIoU')
    assert_learned(untrained, trained, MIOU_MARGIN, ALL_BACKGROUND_MIOU)


def test_castling_segmentation_demo_learns(workspace, tmp_path):
    """CastlingLeViT-S with the SegFormer head at 64x64; the auxiliary softmax branches are faded
    out and removed during these iterations, so the trained model is the deploy one."""
    untrained, trained = before_and_after(
        workspace, tmp_path, SEG_SMALL,
        'configs/castling/segformer-head_castling-levit-s_1xb8-600i_shapes-cityscapes-128.py',
        200, 'mIoU')
    assert_learned(untrained, trained, MIOU_MARGIN, ALL_BACKGROUND_MIOU)


def test_picodet_castling_demo_learns(workspace, tmp_path):
    """PicoDet-S-Castling from scratch at 64x64: box AP50 above the untrained model's."""
    untrained, trained = before_and_after(
        workspace, tmp_path, DET_SMALL,
        'configs/picodet/picodet-s_castling_1xb16-600i_shapes-coco-128.py', 100, 'bbox_mAP_50')
    assert_learned(untrained, trained, AP50_MARGIN)
