# 108 epochs, lr x0.1 at epoch 80 (SMCA's long schedule).
_base_ = './schedule_50e.py'

max_epochs = 108
train_cfg = dict(max_epochs=max_epochs)
param_scheduler = [
    dict(type='MultiStepLR', begin=0, end=max_epochs, by_epoch=True, milestones=[80], gamma=0.1),
]
