# Castling-LeViT-S, the backbone of PicoDet-S-Castling, on the shapes demo's classification split (3
# classes, 64x64): its checkpoint starts picodet-s_castling_1xb16-600i_shapes-coco-128.py.
# CastlingScheduleHook fades the auxiliary softmax branches out over the third quarter and removes
# them.
_base_ = ['../_base_/datasets/demo_shapes_imagenet.py', '../_base_/schedules/demo_cls_300i.py']

model = dict(
    type='ImageClassifier', backbone=dict(type='CastlingLeViT', arch='s', out_indices=(2, )),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(type='LinearClsHead', num_classes=3, in_channels=160,
              loss=dict(type='CrossEntropyLoss')))
default_hooks = dict(castling=dict(type='CastlingScheduleHook', fade_start=0.5, fade_end=0.75))
