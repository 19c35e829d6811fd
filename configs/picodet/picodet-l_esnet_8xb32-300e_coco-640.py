# PP-PicoDet-L v1 at 640: multi-scale training 576-704 (PaddleDetection `picodet_l_640_coco`).
_base_ = './picodet-l_esnet_8xb32-300e_coco-320.py'

image_size = (640, 640)
model = dict(data_preprocessor=dict(batch_augments=[
    dict(type='BatchSyncRandomResize', random_size_range=(576, 704), size_divisor=32, interval=1)]))
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
