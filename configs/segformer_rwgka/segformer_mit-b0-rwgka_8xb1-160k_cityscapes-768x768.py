# SegFormer-B0-RWGKA at Cityscapes 768x768 (Table 1, real-time rows): trained on 768x768 crops and
# tested on images resized to a short side of 768 (SegFormer's real-time settings), whole-image
# inference.
_base_ = './segformer_mit-b0-rwgka_8xb1-160k_cityscapes-1024x1024.py'

crop_size = (768, 768)
test_scale = (1536, 768)
train_pipeline = [
    dict(type='LoadImageFromFile'), dict(type='LoadAnnotations'),
    dict(type='RandomResize', scale=test_scale, ratio_range=(0.5, 2.0), keep_ratio=True),
    dict(type='RandomCrop', crop_size=crop_size, cat_max_ratio=0.75),
    dict(type='RandomFlip', prob=0.5), dict(type='PhotoMetricDistortion'),
    dict(type='PackSegInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'), dict(type='Resize', scale=test_scale, keep_ratio=True),
    dict(type='LoadAnnotations'), dict(type='PackSegInputs'),
]
model = dict(data_preprocessor=dict(size=crop_size), test_cfg=dict(_delete_=True, mode='whole'))
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader
