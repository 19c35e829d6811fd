# ViL's COCO "3x" schedule (Table 9 of arXiv:2103.15358): 270k iterations at batch 16, lr x0.1 at
# 180k and 240k (about 24.6, 32.7 and 36.8 epochs of COCO train2017); the optimizer of the 1x.
_base_ = './schedule_1x_vil-adamw.py'

max_iters = 270000
train_cfg = dict(max_iters=max_iters)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.001, by_epoch=False, begin=0, end=1000),
    dict(type='MultiStepLR', by_epoch=False, begin=0, end=max_iters, milestones=[180000, 240000],
         gamma=0.1),
]
