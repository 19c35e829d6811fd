# Stand-in demo until a model family of mmvisattn learns on the shapes data: stock mmdet
# RetinaNet with a ResNet-18 trained from scratch (no pretrained weights can be downloaded here),
# BatchNorm in training mode, AdamW, 600 iterations of batch 8 on 128x128 images.
_base_ = [
    'mmdet::_base_/models/retinanet_r50_fpn.py',
    '../_base_/datasets/demo_shapes_coco_detection.py',
    '../_base_/det_runtime.py',
    '../_base_/schedules/demo_600i.py',
]

model = dict(
    backbone=dict(
        depth=18,
        norm_cfg=dict(type='BN', requires_grad=True),
        norm_eval=False,
        init_cfg=None),
    neck=dict(in_channels=[64, 128, 256, 512]),
    bbox_head=dict(num_classes=3))
default_hooks = dict(
    logger=dict(interval=10),
    checkpoint=dict(by_epoch=False, interval={{_base_.max_iters}}, max_keep_ckpts=1))
log_processor = dict(by_epoch=False)
