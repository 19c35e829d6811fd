# Mask R-CNN with PerViT-Tiny (arXiv:2206.06801) on COCO, 1x schedule. PerViT keeps one stride-16
# token grid in every stage, so a ViTDet-style simple feature pyramid turns the four stage outputs
# into strides 4-32 out of stock parts: ChannelMapper (1x1 convs to 256 channels), mmseg's
# Feature2Pyramid (2 deconvs / 1 deconv / identity / max-pool) and an FPN that adds the lateral and
# output convs and the stride-64 level. Start from ImageNet weights converted by
# tools/model_converters/pervit2mmvisattn.py (official pervit_tiny checkpoint). At 1333x800 the
# grid is 50x84 and training Phi_p keeps about 5 GB of hidden maps per layer (60 GB for the 12),
# so the blocks are recomputed in the backward pass (with_cp): one layer's maps at a time.
_base_ = [
    'mmdet::_base_/models/mask-rcnn_r50_fpn.py', '../_base_/datasets/coco_instance.py',
    '../_base_/schedules/schedule_1x.py', '../_base_/det_runtime.py',
]

arch = 'tiny'
stage_channels = [192, 224, 280, 280]
checkpoint = 'pretrain/pervit-t_in1k.pth'
model = dict(
    backbone=dict(
        _delete_=True, type='PerViT', arch=arch, drop_path_rate=0.1, out_indices=(0, 1, 2, 3),
        with_cp=True, init_cfg=dict(type='Pretrained', checkpoint=checkpoint)),
    neck=[
        dict(type='ChannelMapper', in_channels=stage_channels, out_channels=256, kernel_size=1,
             act_cfg=None, norm_cfg=dict(type='GN', num_groups=32)),
        dict(type='mmseg.Feature2Pyramid', embed_dim=256, rescales=[4, 2, 1, 0.5],
             norm_cfg=dict(type='GN', num_groups=32)),
        dict(type='FPN', in_channels=[256, 256, 256, 256], out_channels=256, num_outs=5),
    ])

optim_wrapper = dict(
    _delete_=True, type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=1e-4, betas=(0.9, 0.999), weight_decay=0.05),
    paramwise_cfg=dict(norm_decay_mult=0.0, custom_keys={'rpe_proj': dict(decay_mult=0.0),
                                                         '.position.': dict(decay_mult=0.0)}),
    clip_grad=dict(max_norm=1.0, norm_type=2))
