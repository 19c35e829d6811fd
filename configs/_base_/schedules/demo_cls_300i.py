# The shapes classification demos' schedule and runtime: demo_adamw.py over 300 iterations of batch
# 32 (a minute or two on a CPU core at 64x64), 30 warm-up iterations and cosine decay, seed 0 as
# demo_600i.py's (in place of mmpretrain's None); logged every 10 iterations, one checkpoint at the
# end.
_base_ = ['../demo_adamw.py', '../cls_runtime.py']

max_iters = 300
train_cfg = dict(max_iters=max_iters, val_interval=max_iters)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=30),
    dict(type='CosineAnnealingLR', by_epoch=False, begin=30, end=max_iters, eta_min=1e-5),
]
auto_scale_lr = dict(base_batch_size=32)
randomness = dict(seed=0)
default_hooks = dict(
    logger=dict(type='LoggerHook', interval=10, log_metric_by_epoch=False),
    checkpoint=dict(type='CheckpointHook', by_epoch=False, interval=max_iters, max_keep_ckpts=1))
log_processor = dict(by_epoch=False)
