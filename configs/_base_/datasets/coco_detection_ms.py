# COCO 2017 boxes with multi-scale training (the "3x+MS" recipes): the shorter side drawn from 640,
# 672, ..., 800, the longer side at most 1333; testing as coco_detection.py.
_base_ = './coco_detection.py'

train_pipeline = [
    dict(type='LoadImageFromFile', backend_args={{_base_.backend_args}}),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='RandomChoiceResize',
         scales=[(1333, 640), (1333, 672), (1333, 704), (1333, 736), (1333, 768),
                                            (1333, 800)], keep_ratio=True),
    dict(type='RandomFlip', prob=0.5), dict(type='PackDetInputs'),
]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
