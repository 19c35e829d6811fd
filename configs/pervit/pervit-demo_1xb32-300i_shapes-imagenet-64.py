# A small PerViT classifier on the shapes demo's classification split (3 classes, 64x64: 4x4 tokens
# after the stride-16 stem), the last stage's output norm average-pooled into a linear head.
_base_ = ['../_base_/datasets/demo_shapes_imagenet.py', '../_base_/schedules/demo_cls_300i.py']

model = dict(
    type='ImageClassifier',
    backbone=dict(type='PerViT',
                  arch=dict(num_heads=2, depths=(1, 1, 1, 1), embed_dims=(32, 48, 64, 80),
                                           stem_channels=(16, 24, 32, 32)), out_indices=(3, ),
                  drop_path_rate=0.0),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(type='LinearClsHead', num_classes=3, in_channels=80,
              loss=dict(type='CrossEntropyLoss')))
optim_wrapper = dict(optimizer=dict(lr=5e-4))
