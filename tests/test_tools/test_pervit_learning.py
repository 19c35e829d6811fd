"""Learning checks of the PerViT demos: a narrow PerViT (2 heads, one block per stage, widths 32-48)
with the heads of each demo config, trained through the stock tools for about a minute on small
shapes images, beats the untrained model. The full demos and their figures:
configs/pervit/README.md."""
from .test_learning import (
    ALL_BACKGROUND_MIOU,
    AP50_MARGIN,
    MIOU_MARGIN,
    assert_learned,
    before_and_after,
)

NARROW_PERVIT = """
_base_ = {base!r}
narrow_arch = dict(_delete_=True, num_heads=2, depths=(1, 1, 1, 1), embed_dims=(32, 32, 48, 48),
                   stem_channels=(16, 16, 32, 32))
narrow_outs = [32, 48, 48, 48]
randomness = dict(seed=0)
train_cfg = dict(max_iters={iters}, val_interval={iters})
param_scheduler = [dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=20)]
"""

UPERNET_SMALL = (
    NARROW_PERVIT
    + """
size = (64, 64)
norm_cfg = dict(type='BN', requires_grad=True)
train_pipeline = [dict(type='LoadImageFromFile'), dict(type='LoadAnnotations'),
                  dict(type='Resize', scale=size, keep_ratio=True),
                  dict(type='RandomFlip', prob=0.5),
                  dict(type='PackSegInputs')]
test_pipeline = [dict(type='LoadImageFromFile'), dict(type='Resize', scale=size, keep_ratio=True),
                 dict(type='LoadAnnotations'), dict(type='PackSegInputs')]
model = dict(
    data_preprocessor=dict(size=size),
    backbone=dict(arch=narrow_arch),
    neck=[dict(type='mmdet.ChannelMapper', in_channels=narrow_outs, out_channels=32, kernel_size=1,
               act_cfg=None, norm_cfg=norm_cfg),
          dict(type='Feature2Pyramid', embed_dim=32, rescales=[4, 2, 1, 0.5], norm_cfg=norm_cfg)],
    decode_head=dict(in_channels=[32, 32, 32, 32], channels=32, pool_scales=(1, 2)))
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader
"""
)

# Mask R-CNN's time here goes to mmcv's CPU RoIAlign backward, which scales with channels x RoIs:
# hence half the demo's 128 channels and sampled RoIs, one sample per RoI bin (a bin is about one
# stride-4 cell at 96x96), a two-conv mask head and fewer proposals.
MASK_RCNN_SMALL = (
    NARROW_PERVIT
    + """
size = (96, 96)
width = 64
norm_cfg = dict(type='GN', num_groups=16)
train_pipeline = [dict(type='LoadImageFromFile'),
                  dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
                  dict(type='Resize', scale=size, keep_ratio=True),
                  dict(type='RandomFlip', prob=0.5),
                  dict(type='PackDetInputs')]
test_pipeline = [dict(type='LoadImageFromFile'), dict(type='Resize', scale=size, keep_ratio=True),
                 dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
                 dict(type='PackDetInputs',
                      meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor'))]
roi_extractor = dict(out_channels=width, roi_layer=dict(sampling_ratio=1))
model = dict(
    backbone=dict(arch=narrow_arch),
    neck=[dict(type='ChannelMapper', in_channels=narrow_outs, out_channels=width, kernel_size=1,
               act_cfg=None, norm_cfg=norm_cfg),
          dict(type='mmseg.Feature2Pyramid', embed_dim=width, rescales=[4, 2, 1, 0.5],
               norm_cfg=norm_cfg),
          dict(type='FPN', in_channels=[width] * 4, out_channels=width, num_outs=5)],
    rpn_head=dict(in_channels=width, feat_channels=width),
    roi_head=dict(bbox_roi_extractor=roi_extractor,
                  bbox_head=dict(in_channels=width, fc_out_channels=128),
                  mask_roi_extractor=roi_extractor,
                  mask_head=dict(num_convs=2, in_channels=width, conv_out_channels=width)),
    train_cfg=dict(rpn_proposal=dict(nms_pre=500, max_per_img=200),
                   rcnn=dict(sampler=dict(num=64))),
    test_cfg=dict(rpn=dict(nms_pre=300, max_per_img=100)))
loader = dict(num_workers=0, persistent_workers=False)
train_dataloader = dict(dataset=dict(pipeline=train_pipeline), **loader)
val_dataloader = dict(dataset=dict(pipeline=test_pipeline), **loader)
test_dataloader = val_dataloader
default_hooks = dict(logger=dict(interval=20), checkpoint=dict(interval={iters}))
"""
)


def test_pervit_upernet_demo_learns(workspace, tmp_path, monkeypatch):
    """250 iterations of batch 8 at 64x64 (a 4x4 token grid; at 200 the model still predicts all
    background), single-threaded: the many small ops of this model ran 15x slower with two OpenMP
    threads each on a shared, busy machine."""
    monkeypatch.setenv('OMP_NUM_THREADS', '1')
    untrained, trained = before_and_after(
        workspace, tmp_path, UPERNET_SMALL,
        'configs/pervit/upernet_pervit-t_1xb8-600i_shapes-cityscapes-128.py', 250, 'mIoU',
    )
    assert_learned(untrained, trained, MIOU_MARGIN, ALL_BACKGROUND_MIOU)


def test_pervit_mask_rcnn_demo_learns(workspace, tmp_path, monkeypatch):
    """60 iterations of batch 8 at 96x96 (a 6x6 token grid): box AP50 above the untrained
    model's."""
    monkeypatch.setenv('OMP_NUM_THREADS', '1')
    untrained, trained = before_and_after(workspace, tmp_path, MASK_RCNN_SMALL,
                                          'configs/pervit/mask-rcnn_pervit-t_simplefpn_1xb8-600i_shapes-coco-128.py',
                                          60, 'bbox_mAP_50')
    assert_learned(untrained, trained, AP50_MARGIN)
