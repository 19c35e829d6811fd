# PP-PicoDet-S v1 (PaddleDetection release/2.6 `picodet_s_320_coco`) in mmdet 3: ESNet-S, CSP-PAN
# with P6 (96 channels), PicoHead (2 depthwise-separable 5x5 convs per level, VFL + GIoU + DFL,
# SimOTA), 300 epochs of SGD with cosine decay and EMA, multi-scale training 256-384.
# The zoo figure (27.1 mAP) started from an ImageNet-pretrained ESNet, which cannot be downloaded
# here; this config trains from scratch unless `model.backbone.init_cfg` names a checkpoint.
_base_ = [
    '../_base_/models/picodet-s_esnet_csppan.py', '../_base_/datasets/coco_detection.py',
    '../_base_/schedules/schedule_300e.py', '../_base_/det_runtime.py',
]

image_size = (320, 320)
train_pipeline = [
    dict(type='LoadImageFromFile', backend_args={{_base_.backend_args}}),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='MinIoURandomCrop', min_ious=(0.1, 0.3, 0.5, 0.7, 0.9), min_crop_size=0.3),
    dict(type='PhotoMetricDistortion'), dict(type='RandomFlip', prob=0.5),
    dict(type='Resize', scale=image_size, keep_ratio=False), dict(type='PackDetInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile', backend_args={{_base_.backend_args}}),
    dict(type='Resize', scale=image_size, keep_ratio=False),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='PackDetInputs',
         meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor')),
]
train_dataloader = dict(batch_size=32, num_workers=4, dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(batch_size=8, num_workers=2, dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader

# The v1 recipe's lr 0.4 was for a total batch of 512; 8 x 32 = 256 takes half.
optim_wrapper = dict(optimizer=dict(lr=0.2))
auto_scale_lr = dict(base_batch_size=256)
# PaddleDetection keeps an EMA of the weights (decay 0.9998) and evaluates it.
custom_hooks = [*_base_.custom_hooks,
                dict(type='EMAHook', ema_type='ExpMomentumEMA', momentum=0.0002,
                     update_buffers=True, priority=49)]
