# PP-PicoDet-S v1 (PaddleDetection release/2.6 `picodet_s_320_coco`) in mmdet 3: ESNet-S, CSP-PAN
# with P6 (96 channels), PicoHead (2 depthwise-separable 5x5 convs per level, VFL + GIoU + DFL,
# SimOTA), 80 classes; one size per batch drawn from 256, 288, ..., 384 (PaddleDetection's
# BatchRandomResize), which a config at another input size replaces.
model = dict(
    type='SingleStageDetector',
    data_preprocessor=dict(
        type='DetDataPreprocessor', mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375],
        bgr_to_rgb=True, pad_size_divisor=32,
        batch_augments=[dict(type='BatchSyncRandomResize', random_size_range=(256, 384),
                             size_divisor=32, interval=1)]),
    backbone=dict(type='ESNet', arch='s'),
    neck=dict(type='CSPPAN', in_channels=[96, 192, 384], out_channels=96),
    bbox_head=dict(type='PicoHead', num_classes=80, in_channels=96, stacked_convs=2,
                   strides=[8, 16, 32, 64]),
    train_cfg=dict(assigner=dict(type='SimOTAAssigner', center_radius=2.5, candidate_topk=10,
                                 iou_weight=6.0)),
    test_cfg=dict(nms_pre=1000, score_thr=0.025, nms=dict(type='nms', iou_threshold=0.6),
                  max_per_img=100))
