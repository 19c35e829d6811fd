# det_runtime.py for schedules counted in iterations (IterBasedTrainLoop): checkpoints every 7330
# iterations (one epoch of COCO train2017 at batch 16, as the schedules validate) and logs by
# iteration.
_base_ = './det_runtime.py'

default_hooks = dict(checkpoint=dict(by_epoch=False, interval=7330))
log_processor = dict(by_epoch=False)
