# A small Castling-ViT on the shapes demo's classification split (3 classes, 64x64, 8x8 patches):
# linear-angular attention with the auxiliary softmax branch, faded out and removed by
# CastlingScheduleHook. The patch tokens, after the final LayerNorm, are average-pooled into the
# linear head (the class token of the ImageNet config learns too slowly from scratch for 300
# iterations here).
_base_ = ['../_base_/datasets/demo_shapes_imagenet.py', '../_base_/schedules/demo_cls_300i.py']

model = dict(
    type='ImageClassifier',
    backbone=dict(type='CastlingViT',
                  attn_cfg=dict(type='LinearAngularAttention', conv='tokens', kernel_size=9),
                  img_size=64, patch_size=8, embed_dims=96, num_layers=4, num_heads=3,
                  with_cls_token=True, final_norm=True, norm_cfg=dict(type='LN', eps=1e-6)),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(type='LinearClsHead', num_classes=3, in_channels=96,
              loss=dict(type='CrossEntropyLoss')))
default_hooks = dict(castling=dict(type='CastlingScheduleHook', fade_start=0.5, fade_end=0.75))
