# Stand-in demo until a model family of mmvisattn learns on the shapes data: stock mmdet
# RetinaNet with a ResNet-18 trained from scratch (no pretrained weights can be downloaded here),
# BatchNorm in training mode, AdamW, 600 iterations of batch 8 on 128x128 images.
_base_ = [
    'mmdet::_base_/models/retinanet_r50_fpn.py',
    '../_base_/datasets/demo_shapes_coco_detection.py',
    '../_base_/det_runtime.py',
]

model = dict(
    backbone=dict(
        depth=18,
        norm_cfg=dict(type='BN', requires_grad=True),
        norm_eval=False,
        init_cfg=None),
    neck=dict(in_channels=[64, 128, 256, 512]),
    bbox_head=dict(num_classes=3))

max_iters = 600
train_cfg = dict(type='IterBasedTrainLoop', max_iters=max_iters, val_interval=max_iters)
val_cfg = dict(type='ValLoop')
test_cfg = dict(type='TestLoop')
optim_wrapper = dict(
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=1e-3, weight_decay=0.05),
    clip_grad=dict(max_norm=10, norm_type=2))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=50),
    dict(type='MultiStepLR', by_epoch=False, begin=0, end=max_iters, milestones=[450], gamma=0.1),
]
default_hooks = dict(
    logger=dict(interval=50),
    checkpoint=dict(by_epoch=False, interval=max_iters, max_keep_ckpts=1))
log_processor = dict(by_epoch=False)
auto_scale_lr = dict(enable=False, base_batch_size=8)
