# Mask R-CNN with PerViT-Tiny from scratch on the COCO-layout shapes data (128x128): the recipe of
# configs/demo (AdamW 1e-3, 600 iterations of batch 8) with the simple feature pyramid of the COCO
# configs. 128x128 images give an 8x8 token grid.
_base_ = [
    'mmdet::_base_/models/mask-rcnn_r50_fpn.py',
    '../_base_/datasets/demo_shapes_coco_instance.py',
    '../_base_/det_runtime.py',
    '../_base_/schedules/demo_600i.py',
]

model = dict(
    backbone=dict(_delete_=True, type='PerViT', arch='tiny', out_indices=(0, 1, 2, 3), init_cfg=None),
    neck=[
        dict(type='ChannelMapper', in_channels=[192, 224, 280, 280], out_channels=256, kernel_size=1,
             act_cfg=None, norm_cfg=dict(type='GN', num_groups=32)),
        dict(type='mmseg.Feature2Pyramid', embed_dim=256, rescales=[4, 2, 1, 0.5],
             norm_cfg=dict(type='GN', num_groups=32)),
        dict(type='FPN', in_channels=[256, 256, 256, 256], out_channels=256, num_outs=5),
    ],
    roi_head=dict(bbox_head=dict(num_classes=3), mask_head=dict(num_classes=3)))

optim_wrapper = dict(paramwise_cfg=dict(norm_decay_mult=0.0, custom_keys={'rpe_proj': dict(decay_mult=0.0),
                                                                        '.position.': dict(decay_mult=0.0)}))
default_hooks = dict(
    logger=dict(interval=50),
    checkpoint=dict(by_epoch=False, interval={{_base_.max_iters}}, max_keep_ckpts=1))
log_processor = dict(by_epoch=False)
