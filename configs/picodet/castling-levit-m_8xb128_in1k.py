# Castling-LeViT-M, the backbone of PicoDet-M-Castling, on ImageNet-1k at 224 (arXiv:2211.10526
# gives no layout and no ImageNet result, so no target): DeiT's recipe (300 epochs at batch 1024;
# LeViT's own, 1000 epochs with distillation, needs a teacher this project does not ship) and
# CastlingScheduleHook removing the auxiliary softmax branch in the last quarter. The last stage,
# average-pooled, feeds a linear head.
_base_ = './castling-levit-s_8xb128_in1k.py'

model = dict(backbone=dict(arch='m'), head=dict(in_channels=256))
