# PP-PicoDet-S v1 at 416: multi-scale training 352-480 (PaddleDetection `picodet_s_416_coco`).
_base_ = './picodet-s_esnet_8xb32-300e_coco-320.py'

image_size = (416, 416)
model = dict(data_preprocessor=dict(batch_augments=[
    dict(type='BatchSyncRandomResize', random_size_range=(352, 480), size_divisor=32, interval=1)]))
train_pipeline = [
    dict(type='LoadImageFromFile', backend_args={{_base_.backend_args}}),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='MinIoURandomCrop', min_ious=(0.1, 0.3, 0.5, 0.7, 0.9), min_crop_size=0.3),
    dict(type='PhotoMetricDistortion'), dict(type='RandomFlip', prob=0.5),
    dict(type='Resize', scale=image_size, keep_ratio=False), dict(type='PackDetInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile', backend_args={{_base_.backend_args}}),
    dict(type='Resize', scale=image_size, keep_ratio=False),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='PackDetInputs',
         meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor')),
]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader
