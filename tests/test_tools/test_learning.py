"""Short learning checks through the stock tools: a demo config trained for a minute beats the
untrained model on the shapes data. Longer runs and their figures: `make demo` and the READMEs."""
import re

import torch
from mmengine.config import Config
from mmengine.registry import init_default_scope

import mmvisattn  # noqa: F401

from ..conftest import REPO, run_tool

SEG_SMALL = """
_base_ = {base!r}
size = (64, 64)
train_pipeline = [dict(type='LoadImageFromFile'), dict(type='LoadAnnotations'),
                  dict(type='Resize', scale=size, keep_ratio=True), dict(type='RandomFlip', prob=0.5),
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


def untrained_checkpoint(config, path):
    cfg = Config.fromfile(config)
    init_default_scope(cfg.default_scope)
    from mmseg.registry import MODELS
    torch.manual_seed(0)
    model = MODELS.build(cfg.model)
    model.init_weights()
    torch.save({'state_dict': model.state_dict(), 'meta': {}}, path)


def metric(output: str, name: str) -> float:
    return float(re.findall(rf'{name}: ([0-9.]+)', output)[-1])


def test_segformer_rwgka_demo_learns(workspace, tmp_path):
    """300 iterations at 64x64 (about a minute): the RWGKA SegFormer-B0 separates the shapes from
    the background (measured: mIoU 38.8 against 22.7 for all-background and less untrained)."""
    config = tmp_path / 'small.py'
    base = REPO / 'configs/segformer_rwgka/segformer_mit-b0-rwgka_1xb8-600i_shapes-cityscapes-128.py'
    config.write_text(SEG_SMALL.format(base=str(base), iters=300))
    untrained_checkpoint(config, tmp_path / 'untrained.pth')
    before = run_tool(['tools/test.py', config, tmp_path / 'untrained.pth', '--work-dir', tmp_path / 'before'],
                      cwd=workspace)
    trained = run_tool(['tools/train.py', config, '--work-dir', tmp_path / 'train'], cwd=workspace)
    untrained_miou = metric(before.stdout + before.stderr, 'mIoU')
    trained_miou = metric(trained.stdout + trained.stderr, 'mIoU')
    all_background_miou = 22.66  # background IoU 90.6 / 4 classes on the validation split
    assert trained_miou > max(untrained_miou, all_background_miou), (untrained_miou, trained_miou)
