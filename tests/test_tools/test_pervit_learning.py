"""Learning check of the PerViT segmentation demo: a narrow PerViT with UperNet, trained through the
stock tools for about a minute on 64x64 shapes, beats the untrained model and the all-background
answer. The full demo and its figures: configs/pervit/README.md."""
from ..conftest import REPO, run_tool
from .test_learning import metric, untrained_checkpoint

SMALL = """
_base_ = {base!r}
size = (64, 64)
norm_cfg = dict(type='BN', requires_grad=True)
train_pipeline = [dict(type='LoadImageFromFile'), dict(type='LoadAnnotations'),
                  dict(type='Resize', scale=size, keep_ratio=True), dict(type='RandomFlip', prob=0.5),
                  dict(type='PackSegInputs')]
test_pipeline = [dict(type='LoadImageFromFile'), dict(type='Resize', scale=size, keep_ratio=True),
                 dict(type='LoadAnnotations'), dict(type='PackSegInputs')]
model = dict(
    data_preprocessor=dict(size=size),
    backbone=dict(arch=dict(_delete_=True, num_heads=2, depths=(1, 1, 1, 1), embed_dims=(32, 32, 48, 48),
                            stem_channels=(16, 16, 32, 32))),
    neck=[dict(type='mmdet.ChannelMapper', in_channels=[32, 48, 48, 48], out_channels=32, kernel_size=1,
               act_cfg=None, norm_cfg=norm_cfg),
          dict(type='Feature2Pyramid', embed_dim=32, rescales=[4, 2, 1, 0.5], norm_cfg=norm_cfg)],
    decode_head=dict(in_channels=[32, 32, 32, 32], channels=32, pool_scales=(1, 2)))
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader
train_cfg = dict(max_iters={iters}, val_interval={iters})
param_scheduler = [dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=20)]
randomness = dict(seed=0)
"""


def test_pervit_upernet_demo_learns(workspace, tmp_path, monkeypatch):
    """300 iterations of batch 8 at 64x64 (a 4x4 token grid), single-threaded: the many small ops
    of this model ran 15x slower with two OpenMP threads each on a shared, busy machine."""
    monkeypatch.setenv('OMP_NUM_THREADS', '1')
    config = tmp_path / 'small.py'
    base = REPO / 'configs/pervit/upernet_pervit-t_1xb8-600i_shapes-cityscapes-128.py'
    config.write_text(SMALL.format(base=str(base), iters=300))
    untrained_checkpoint(config, tmp_path / 'untrained.pth')
    before = run_tool(['tools/test.py', config, tmp_path / 'untrained.pth', '--work-dir', tmp_path / 'before'],
                      cwd=workspace)
    trained = run_tool(['tools/train.py', config, '--work-dir', tmp_path / 'train'], cwd=workspace)
    untrained_miou = metric(before.stdout + before.stderr, 'mIoU')
    trained_miou = metric(trained.stdout + trained.stderr, 'mIoU')
    all_background_miou = 22.66  # background IoU 90.6 / 4 classes on the validation split
    assert trained_miou > max(untrained_miou, all_background_miou), (untrained_miou, trained_miou)
