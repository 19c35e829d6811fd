# The embedded synthetic shapes data in the COCO layout (boxes), written by
# `python tools/misc/make_demo_data.py --out data/shapes`: 300 train / 50 val images of 128x128.
dataset_type = 'CocoDataset'
data_root = 'data/shapes/coco/'
metainfo = dict(classes=('circle', 'rectangle', 'triangle'),
                palette=[(220, 20, 60), (0, 128, 255), (60, 180, 75)])
image_size = (128, 128)
backend_args = None

train_pipeline = [
    dict(type='LoadImageFromFile', backend_args=backend_args),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='Resize', scale=image_size, keep_ratio=True), dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile', backend_args=backend_args),
    dict(type='Resize', scale=image_size, keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='PackDetInputs',
         meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor')),
]
train_dataloader = dict(
    batch_size=8, num_workers=2, persistent_workers=True,
    sampler=dict(type='InfiniteSampler', shuffle=True),
    batch_sampler=dict(type='AspectRatioBatchSampler'),
    dataset=dict(
        type=dataset_type, data_root=data_root, metainfo=metainfo,
        ann_file='annotations/instances_train2017.json', data_prefix=dict(img='train2017/'),
        filter_cfg=dict(filter_empty_gt=True, min_size=4), pipeline=train_pipeline,
        backend_args=backend_args))
val_dataloader = dict(
    batch_size=8, num_workers=2, persistent_workers=True, drop_last=False,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(
        type=dataset_type, data_root=data_root, metainfo=metainfo,
        ann_file='annotations/instances_val2017.json', data_prefix=dict(img='val2017/'),
        test_mode=True, pipeline=test_pipeline, backend_args=backend_args))
test_dataloader = val_dataloader

val_evaluator = dict(
    type='CocoMetric', ann_file=data_root + 'annotations/instances_val2017.json', metric='bbox',
    format_only=False, backend_args=backend_args)
test_evaluator = val_evaluator
