# ViL's COCO "1x" schedule (Table 9 of arXiv:2103.15358, shared by its RetinaNet and Mask R-CNN
# recipes), counted in iterations as the table gives it: 90k iterations at batch 16 (8 GPUs x 2
# images), lr x0.1 at 60k and 80k, linear warm-up over the first 1000. AdamW, lr 1e-4, weight decay
# 0.05, gradient clipping at norm 1, no weight decay on norms, global tokens and relative-position
# tables (as the official code). Validation every 7330 iterations, one epoch of COCO train2017 at
# batch 16; pair with ../det_runtime_iter.py, which checkpoints and logs on the same count.
max_iters = 90000
iters_per_epoch = 7330
train_cfg = dict(type='IterBasedTrainLoop', max_iters=max_iters, val_interval=iters_per_epoch)
val_cfg = dict(type='ValLoop')
test_cfg = dict(type='TestLoop')
param_scheduler = [
    dict(type='LinearLR', start_factor=0.001, by_epoch=False, begin=0, end=1000),
    dict(type='MultiStepLR', by_epoch=False, begin=0, end=max_iters, milestones=[60000, 80000],
         gamma=0.1),
]
optim_wrapper = dict(
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=1e-4, betas=(0.9, 0.999), weight_decay=0.05),
    clip_grad=dict(max_norm=1.0, norm_type=2),
    paramwise_cfg=dict(custom_keys={
        'norm': dict(decay_mult=0.0), 'cls_token': dict(decay_mult=0.0),
        'pos_embed': dict(decay_mult=0.0), 'relative_position': dict(decay_mult=0.0),
    }))
auto_scale_lr = dict(enable=False, base_batch_size=16)
