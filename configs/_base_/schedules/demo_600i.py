# The shapes demos' schedule: 600 iterations (a few CPU minutes at 128x128), validated once at
# the end, AdamW 1e-3 with gradient clipping, 50 warm-up iterations and lr x0.1 at 450. Demos
# change the optimizer or the scheduler list where their model needs it. Hooks and the log
# processor belong to the runtime bases (bases may not share keys), so each demo sets its
# iteration-based logging and single checkpoint itself.
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
auto_scale_lr = dict(enable=False, base_batch_size=8)
