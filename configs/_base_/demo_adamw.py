# What the shapes demos' schedules share (schedules/demo_600i.py, schedules/demo_cls_300i.py):
# iteration-based loops validated once at the end, AdamW 1e-3 with gradient clipping, no lr scaling
# by batch size. The schedules add their length, their lr schedule and their seed.
train_cfg = dict(type='IterBasedTrainLoop')
val_cfg = dict(type='ValLoop')
test_cfg = dict(type='TestLoop')
optim_wrapper = dict(
    type='OptimWrapper', optimizer=dict(type='AdamW', lr=1e-3, weight_decay=0.05),
    clip_grad=dict(max_norm=10, norm_type=2))
auto_scale_lr = dict(enable=False, base_batch_size=8)
