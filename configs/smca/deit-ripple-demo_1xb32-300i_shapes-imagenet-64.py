# A small DeiT-Ripple classifier on the shapes demo's classification split (3 classes, 64x64, 8x8
# patches): ripple attention in the lower 4 of 6 layers, linearized attention above, the tokens
# mean-pooled (no class token).
_base_ = ['../_base_/datasets/demo_shapes_imagenet.py', '../_base_/schedules/demo_cls_300i.py']

model = dict(
    type='ImageClassifier',
    backbone=dict(type='DeiTRipple', img_size=64, patch_size=8, embed_dims=96, num_layers=6,
                  num_heads=3, num_ripple_layers=4, drop_path_rate=0.0, out_type='avg_featmap'),
    head=dict(type='LinearClsHead', num_classes=3, in_channels=96,
              loss=dict(type='CrossEntropyLoss')))
