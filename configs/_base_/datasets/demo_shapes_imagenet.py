# The shapes demo's classification split in ImageNet's folder layout (tools/misc/make_demo_data.py
# writes data/shapes/imagenet/{train,val}/<class>/*.png, one shape an image): mmpretrain's
# CustomDataset reads the classes from the folders. 128-pixel images resized to 64, flipped in
# training.
dataset_type = 'CustomDataset'
data_root = 'data/shapes/imagenet/'
metainfo = dict(classes=('circle', 'rectangle', 'triangle'))
data_preprocessor = dict(num_classes=3, mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375],
                         to_rgb=True)
train_pipeline = [
    dict(type='LoadImageFromFile'), dict(type='ResizeEdge', scale=64, edge='short'),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'), dict(type='PackInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'), dict(type='ResizeEdge', scale=64, edge='short'),
    dict(type='PackInputs'),
]
dataset_common = dict(type=dataset_type, data_root=data_root, metainfo=metainfo)
workers = dict(num_workers=2, persistent_workers=True)
train_dataloader = dict(batch_size=32, sampler=dict(type='InfiniteSampler', shuffle=True),
                        **workers,
                        dataset=dict(**dataset_common, data_prefix='train',
                                     pipeline=train_pipeline))
val_dataloader = dict(batch_size=16, sampler=dict(type='DefaultSampler', shuffle=False), **workers,
                      dataset=dict(**dataset_common, data_prefix='val', pipeline=test_pipeline))
val_evaluator = dict(type='Accuracy', topk=(1, ))
test_dataloader = val_dataloader
test_evaluator = val_evaluator
