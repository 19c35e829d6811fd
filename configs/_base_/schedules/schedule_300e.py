# 300 epochs of SGD with cosine decay and a 300-iteration warm-up (PicoDet v1 recipe: lr 0.4 for a
# total batch of 512 (4 x 128), momentum 0.9, weight decay 4e-5).
max_epochs = 300
train_cfg = dict(type='EpochBasedTrainLoop', max_epochs=max_epochs, val_interval=10)
val_cfg = dict(type='ValLoop')
test_cfg = dict(type='TestLoop')
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=300),
    dict(type='CosineAnnealingLR', eta_min=0.0, begin=0, end=max_epochs, T_max=max_epochs,
         by_epoch=True, convert_to_iter_based=True),
]
optim_wrapper = dict(
    type='OptimWrapper', optimizer=dict(type='SGD', lr=0.4, momentum=0.9, weight_decay=4e-5),
    paramwise_cfg=dict(norm_decay_mult=0.0, bias_decay_mult=0.0))
auto_scale_lr = dict(enable=False, base_batch_size=512)
