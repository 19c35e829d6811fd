# Table 3's 108-epoch schedule (arXiv:2110.02453; lr x0.1 at epoch 80) for
# smca-ripple_r50_8xb2-50e_coco.py.
_base_ = './smca-ripple_r50_8xb2-50e_coco.py'

max_epochs = 108
train_cfg = dict(max_epochs=max_epochs)
param_scheduler = [dict(type='MultiStepLR', begin=0, end=max_epochs, by_epoch=True, milestones=[80],
                        gamma=0.1)]
