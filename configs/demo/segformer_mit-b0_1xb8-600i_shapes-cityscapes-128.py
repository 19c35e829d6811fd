# Stock mmseg SegFormer-B0 from scratch on the Cityscapes-layout shapes data (128x128),
# the segmentation counterpart of the detection demo.
_base_ = [
    'mmseg::_base_/models/segformer_mit-b0.py', '../_base_/datasets/demo_shapes_cityscapes.py',
    '../_base_/seg_runtime.py', '../_base_/schedules/demo_600i.py',
]

crop_size = (128, 128)
data_preprocessor = dict(size=crop_size)
model = dict(
    data_preprocessor=data_preprocessor, backbone=dict(init_cfg=None),
    decode_head=dict(num_classes=4, norm_cfg=dict(type='BN', requires_grad=True)))

optim_wrapper = dict(
    optimizer=dict(betas=(0.9, 0.999), weight_decay=0.01), clip_grad=None,
    paramwise_cfg=dict(custom_keys=dict(
        pos_block=dict(decay_mult=0.0), norm=dict(decay_mult=0.0), head=dict(lr_mult=10.0))))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=50),
    dict(type='PolyLR', eta_min=0.0, power=1.0, by_epoch=False, begin=50, end={{_base_.max_iters}}),
]
# mmseg keeps its default hooks in the schedule files, so the demo lists them in full.
default_hooks = dict(
    timer=dict(type='IterTimerHook'),
    logger=dict(type='LoggerHook', interval=10, log_metric_by_epoch=False),
    param_scheduler=dict(type='ParamSchedulerHook'),
    checkpoint=dict(type='CheckpointHook', by_epoch=False, interval={{_base_.max_iters}},
                    max_keep_ckpts=1),
    sampler_seed=dict(type='DistSamplerSeedHook'), visualization=dict(type='SegVisualizationHook'))
log_processor = dict(by_epoch=False)
