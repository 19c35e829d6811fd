# 36 epochs, lr x0.1 at epochs 27 and 33, linear warm-up over 1000 iterations
# (the 3x schedule of mmdet's Swin / PVT Mask R-CNN configs).
_base_ = 'mmdet::_base_/schedules/schedule_1x.py'

max_epochs = 36
train_cfg = dict(max_epochs=max_epochs)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.001, by_epoch=False, begin=0, end=1000),
    dict(type='MultiStepLR', begin=0, end=max_epochs, by_epoch=True, milestones=[27, 33], gamma=0.1),
]
