# The embedded shapes data in the Cityscapes layout (leftImg8bit/, gtFine/*_labelTrainIds.png),
# written by `python tools/misc/make_demo_data.py --out data/shapes`. The stock CityscapesDataset
# reads the files, but its 19 class names would not match, so the demo uses its parent
# BaseSegDataset with the same suffixes and the shapes classes.
dataset_type = 'BaseSegDataset'
data_root = 'data/shapes/cityscapes/'
metainfo = dict(classes=('background', 'circle', 'rectangle', 'triangle'),
                palette=[[128, 128, 128], [220, 20, 60], [0, 128, 255], [60, 180, 75]])
crop_size = (128, 128)
train_pipeline = [
    dict(type='LoadImageFromFile'), dict(type='LoadAnnotations'),
    dict(type='RandomResize', scale=(128, 128), ratio_range=(0.75, 1.5), keep_ratio=True),
    dict(type='RandomCrop', crop_size=crop_size, cat_max_ratio=0.9),
    dict(type='RandomFlip', prob=0.5), dict(type='PhotoMetricDistortion'),
    dict(type='PackSegInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'), dict(type='Resize', scale=(128, 128), keep_ratio=True),
    dict(type='LoadAnnotations'), dict(type='PackSegInputs'),
]
dataset_common = dict(
    type=dataset_type, data_root=data_root, metainfo=metainfo, img_suffix='_leftImg8bit.png',
    seg_map_suffix='_gtFine_labelTrainIds.png')
train_dataloader = dict(
    batch_size=8, num_workers=2, persistent_workers=True,
    sampler=dict(type='InfiniteSampler', shuffle=True),
    dataset=dict(**dataset_common,
                 data_prefix=dict(img_path='leftImg8bit/train', seg_map_path='gtFine/train'),
                 pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=1, num_workers=2, persistent_workers=True,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(**dataset_common,
                 data_prefix=dict(img_path='leftImg8bit/val', seg_map_path='gtFine/val'),
                 pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(type='IoUMetric', iou_metrics=['mIoU'])
test_evaluator = val_evaluator
