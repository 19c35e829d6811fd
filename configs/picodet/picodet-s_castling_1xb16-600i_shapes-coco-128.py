# PicoDet-S with the castling LeViT-S backbone from scratch on the COCO-layout shapes data
# (128x128): the PicoDet model, loss and assignment of the COCO configs with a demo-sized recipe
# (AdamW, 600 iterations of batch 16, multi-scale 96-160 per batch, the auxiliary softmax branches
# faded out between 50 % and 75 % of training and removed for the rest and for testing).
_base_ = [
    '../_base_/models/picodet-s_esnet_csppan.py',
    '../_base_/datasets/demo_shapes_coco_detection.py', '../_base_/det_runtime.py',
    '../_base_/schedules/demo_600i.py',
]

model = dict(
    data_preprocessor=dict(batch_augments=[
        dict(type='BatchSyncRandomResize', random_size_range=(96, 160), size_divisor=32,
             interval=1)]),
    backbone=dict(_delete_=True, type='CastlingLeViT', arch='s'),
    neck=dict(in_channels=[48, 96, 160]), bbox_head=dict(num_classes=3))
train_dataloader = dict(batch_size=16)

optim_wrapper = dict(optimizer=dict(lr=2e-3),
                     paramwise_cfg=dict(norm_decay_mult=0.0, bias_decay_mult=0.0))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=50),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=False, begin=50,
         end={{_base_.max_iters}}),
]
default_hooks = dict(
    logger=dict(interval=10),
    checkpoint=dict(by_epoch=False, interval={{_base_.max_iters}}, max_keep_ckpts=1),
    castling=dict(type='CastlingScheduleHook', fade_start=0.5, fade_end=0.75))
log_processor = dict(by_epoch=False)
auto_scale_lr = dict(base_batch_size=16)
