# The demo of `make demo`: the ViL demo model (retinanet_vil-demo_fpn_1xb8-600i_shapes-coco-128.py)
# trained to its plateau, so that its metric moves little with the seed and with the machine's
# summation order (the range measured over seeds and thread counts: docs/records/demo_spread/,
# tools/analysis_tools/demo_spread.py). 3000 iterations of batch 8 (80 epochs of the 300 images),
# 100 warm-up iterations, then a cosine decay to 1e-5; the validation and the checkpoint use an
# average of the weights over the last hundred or so iterations.
_base_ = './retinanet_vil-demo_fpn_1xb8-600i_shapes-coco-128.py'

max_iters = 3000
train_cfg = dict(max_iters=max_iters, val_interval=max_iters)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=100),
    dict(type='CosineAnnealingLR', by_epoch=False, begin=100, end=max_iters, T_max=max_iters - 100,
         eta_min=1e-5),
]
custom_hooks = [*_base_.custom_hooks,
                dict(type='EMAHook', ema_type='ExponentialMovingAverage', momentum=0.01,
                                           priority=49)]
default_hooks = dict(checkpoint=dict(interval=max_iters))
