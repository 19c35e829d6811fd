# Mask R-CNN with PerViT-Tiny from scratch on the COCO-layout shapes data (128x128): the recipe of
# configs/demo (AdamW, 600 iterations of batch 8) with the simple feature pyramid of the COCO
# configs. 128x128 images give an 8x8 token grid. Sized for a CPU: with the stock heads a step took
# 10-15 s, 44 % in mmcv's CPU RoIAlign backward and 42 % in the box head's 12544 x 1024 FC over
# 4096 sampled RoIs. Here the pyramid and heads run at 128 channels, RoIAlign takes 2 x 2 samples
# per bin (stock: adaptive), 128 RoIs are sampled per image (at most 3 shapes each) out of 300
# proposals, and the box head's FCs have 512 units.
_base_ = [
    'mmdet::_base_/models/mask-rcnn_r50_fpn.py', '../_base_/datasets/demo_shapes_coco_instance.py',
    '../_base_/det_runtime.py', '../_base_/schedules/demo_600i.py',
]

width = 128
norm_cfg = dict(type='GN', num_groups=32)
roi_extractor = dict(out_channels=width, roi_layer=dict(sampling_ratio=2))
model = dict(
    backbone=dict(_delete_=True, type='PerViT', arch='tiny', out_indices=(0, 1, 2, 3),
                  init_cfg=None),
    neck=[
        dict(type='ChannelMapper', in_channels=[192, 224, 280, 280], out_channels=width,
             kernel_size=1, act_cfg=None, norm_cfg=norm_cfg),
        dict(type='mmseg.Feature2Pyramid', embed_dim=width, rescales=[4, 2, 1, 0.5],
             norm_cfg=norm_cfg),
        dict(type='FPN', in_channels=[width] * 4, out_channels=width, num_outs=5),
    ],
    rpn_head=dict(in_channels=width, feat_channels=width),
    roi_head=dict(
        bbox_roi_extractor=roi_extractor,
        bbox_head=dict(in_channels=width, fc_out_channels=512, num_classes=3),
        mask_roi_extractor=roi_extractor,
        mask_head=dict(in_channels=width, conv_out_channels=width, num_classes=3)),
    train_cfg=dict(rpn_proposal=dict(max_per_img=300), rcnn=dict(sampler=dict(num=128))),
    test_cfg=dict(rpn=dict(max_per_img=300), rcnn=dict(max_per_img=20)))

# lr 2e-4, a fifth of the other demos': the rate its figures in configs/pervit/README.md were
# measured at
optim_wrapper = dict(
    optimizer=dict(lr=2e-4),
    paramwise_cfg=dict(norm_decay_mult=0.0, custom_keys={'rpe_proj': dict(decay_mult=0.0),
                                                         '.position.': dict(decay_mult=0.0)}))
default_hooks = dict(
    logger=dict(interval=10),
    checkpoint=dict(by_epoch=False, interval={{_base_.max_iters}}, max_keep_ckpts=1))
log_processor = dict(by_epoch=False)
