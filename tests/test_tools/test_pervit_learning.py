"""Learning check of the PerViT segmentation demo: a narrow PerViT with UperNet, trained through the
stock tools for about a minute on 64x64 shapes, beats the untrained model and the all-background
answer. The full demo and its figures: configs/pervit/README.md."""
from .test_learning import ALL_BACKGROUND_MIOU, before_and_after

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
    untrained, trained = before_and_after(workspace, tmp_path, SMALL,
                                          'configs/pervit/upernet_pervit-t_1xb8-600i_shapes-cityscapes-128.py', 300,
                                          'mIoU')
    assert trained > max(untrained, ALL_BACKGROUND_MIOU), (untrained, trained)
