# MiT-B0 with random-walk graph kernel attention on the shapes demo's classification split (3
# classes, 64x64), the last stage average-pooled into a linear head: its checkpoint starts the
# SegFormer-B0-RWGKA demo.
_base_ = ['../_base_/datasets/demo_shapes_imagenet.py', '../_base_/schedules/demo_cls_300i.py']

model = dict(
    type='ImageClassifier',
    backbone=dict(type='MixVisionTransformerRWGKA',
                  attn_cfg=dict(type='RWGKAttention', num_anchors=64, lam=0.5),
                  embed_dims=32, num_heads=[1, 2, 5, 8], num_layers=[2, 2, 2, 2], out_indices=(3, ),
                  drop_path_rate=0.0),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(type='LinearClsHead', num_classes=3, in_channels=256,
              loss=dict(type='CrossEntropyLoss')))
