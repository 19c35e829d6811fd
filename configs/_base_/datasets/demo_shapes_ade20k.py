# The embedded shapes data in the ADE20K layout (images/, annotations/ under ADEChallengeData2016),
# read by the stock ADE20KDataset settings: .jpg images, .png maps, 0 = "other" reduced to ignore.
# The demo keeps ADE's suffixes and zero reduction with the shapes classes on BaseSegDataset.
_base_ = './demo_shapes_cityscapes.py'

data_root = 'data/shapes/ade20k/ADEChallengeData2016/'
dataset_common = dict(data_root=data_root, img_suffix='.jpg', seg_map_suffix='.png', reduce_zero_label=True)
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='RandomResize', scale=(128, 128), ratio_range=(0.75, 1.5), keep_ratio=True),
    dict(type='RandomCrop', crop_size=(128, 128), cat_max_ratio=0.9),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PhotoMetricDistortion'),
    dict(type='PackSegInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=(128, 128), keep_ratio=True),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='PackSegInputs'),
]
train_dataloader = dict(dataset=dict(
    **dataset_common, data_prefix=dict(img_path='images/training', seg_map_path='annotations/training'),
    pipeline=train_pipeline))
val_dataloader = dict(dataset=dict(
    **dataset_common, data_prefix=dict(img_path='images/validation', seg_map_path='annotations/validation'),
    pipeline=test_pipeline))
test_dataloader = val_dataloader
