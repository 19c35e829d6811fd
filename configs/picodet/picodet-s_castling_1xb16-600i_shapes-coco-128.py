# PicoDet-S with the castling LeViT-S backbone from scratch on the COCO-layout shapes data (128x128):
# the PicoDet model, loss and assignment of the COCO configs with a demo-sized recipe (AdamW,
# 600 iterations of batch 16, multi-scale 96-160 per batch, the auxiliary softmax branches faded
# out between 50 % and 75 % of training and removed for the rest and for testing).
_base_ = [
    '../_base_/datasets/demo_shapes_coco_detection.py',
    '../_base_/det_runtime.py',
    '../_base_/schedules/demo_600i.py',
]

model = dict(
    type='SingleStageDetector',
    data_preprocessor=dict(
        type='DetDataPreprocessor',
        mean=[123.675, 116.28, 103.53],
        std=[58.395, 57.12, 57.375],
        bgr_to_rgb=True,
        pad_size_divisor=32,
        batch_augments=[dict(type='BatchSyncRandomResize', random_size_range=(96, 160), size_divisor=32,
                             interval=1)]),
    backbone=dict(type='CastlingLeViT', arch='s'),
    neck=dict(type='CSPPAN', in_channels=[48, 96, 160], out_channels=96),
    bbox_head=dict(type='PicoHead', num_classes=3, in_channels=96, stacked_convs=2, strides=[8, 16, 32, 64]),
    train_cfg=dict(assigner=dict(type='SimOTAAssigner', center_radius=2.5, candidate_topk=10, iou_weight=6.0)),
    test_cfg=dict(nms_pre=1000, score_thr=0.025, nms=dict(type='nms', iou_threshold=0.6), max_per_img=100))
train_dataloader = dict(batch_size=16)

optim_wrapper = dict(optimizer=dict(lr=2e-3), paramwise_cfg=dict(norm_decay_mult=0.0, bias_decay_mult=0.0))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=50),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=False, begin=50, end={{_base_.max_iters}}),
]
default_hooks = dict(
    logger=dict(interval=50),
    checkpoint=dict(by_epoch=False, interval={{_base_.max_iters}}, max_keep_ckpts=1),
    castling=dict(type='CastlingScheduleHook', fade_start=0.5, fade_end=0.75))
log_processor = dict(by_epoch=False)
auto_scale_lr = dict(base_batch_size=16)
