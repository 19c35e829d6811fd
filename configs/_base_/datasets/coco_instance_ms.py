# COCO 2017 boxes and masks with the multi-scale training of coco_detection_ms.py.
_base_ = './coco_instance.py'

train_pipeline = [
    dict(type='LoadImageFromFile', backend_args={{_base_.backend_args}}),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='RandomChoiceResize',
         scales=[(1333, 640), (1333, 672), (1333, 704), (1333, 736), (1333, 768),
                                            (1333, 800)], keep_ratio=True),
    dict(type='RandomFlip', prob=0.5), dict(type='PackDetInputs'),
]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
