# Castling-LeViT-S, the backbone of PicoDet-S-Castling, on ImageNet-1k at 224 (arXiv:2211.10526
# gives no layout and no ImageNet result, so no target): DeiT's recipe (300 epochs at batch 1024;
# LeViT's own, 1000 epochs with distillation, needs a teacher this project does not ship) and
# CastlingScheduleHook removing the auxiliary softmax branch in the last quarter. The last stage,
# average-pooled, feeds a linear head.
_base_ = '../_base_/imagenet_1k_deit.py'

model = dict(
    backbone=dict(type='CastlingLeViT', arch='s', out_indices=(2, ), drop_path_rate=0.1),
    head=dict(in_channels=160))
train_dataloader = dict(batch_size=128)
default_hooks = dict(castling=dict(type='CastlingScheduleHook', fade_start=0.5, fade_end=0.75))
