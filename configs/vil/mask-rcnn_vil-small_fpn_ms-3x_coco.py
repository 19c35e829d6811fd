# Mask R-CNN with ViL-Small (arXiv:2103.15358) on COCO, 3x+MS schedule (Table 9): 36 epochs, lr x0.1
# at epochs 27 and 33, the shorter side drawn from 640, 672, ..., 800 (longer side at most 1333),
# drop path 0.2 (the upper end of Table 9's range for the longer schedule).
_base_ = './mask-rcnn_vil-small_fpn_1x_coco.py'

model = dict(backbone=dict(drop_path_rate=0.2))

train_pipeline = [
    dict(type='LoadImageFromFile', backend_args={{_base_.backend_args}}),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='RandomChoiceResize',
         scales=[(1333, 640), (1333, 672), (1333, 704), (1333, 736), (1333, 768), (1333, 800)],
         keep_ratio=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs'),
]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))

max_epochs = 36
train_cfg = dict(max_epochs=max_epochs)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.001, by_epoch=False, begin=0, end=1000),
    dict(type='MultiStepLR', begin=0, end=max_epochs, by_epoch=True, milestones=[27, 33], gamma=0.1),
]
