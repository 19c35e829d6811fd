# The shapes demos' schedule: 600 iterations (a few CPU minutes at 128x128) of demo_adamw.py, 50
# warm-up iterations and lr x0.1 at 450, seed 0 (mmengine draws a seed per run where none is set; a
# demo gives the same numbers every run). Demos change the optimizer or the scheduler list where
# their model needs it. Hooks and the log processor belong to the runtime bases (bases may not share
# keys), so each demo sets its iteration-based logging and single checkpoint itself.
_base_ = '../demo_adamw.py'

max_iters = 600
train_cfg = dict(max_iters=max_iters, val_interval=max_iters)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=50),
    dict(type='MultiStepLR', by_epoch=False, begin=0, end=max_iters, milestones=[450], gamma=0.1),
]
randomness = dict(seed=0)
