# PicoDet-S at 416 with the castling LeViT-S backbone in place of ESNet-S (same size within 2 %),
# same recipe. CastlingScheduleHook fades the auxiliary softmax branches out between 50 % and
# 75 % of training and removes them, so the last quarter trains the linear-time deploy model; it is
# a key of default_hooks so that it merges with the inherited hooks instead of replacing the EMA.
_base_ = './picodet-s_esnet_8xb32-300e_coco-416.py'

model = dict(backbone=dict(_delete_=True, type='CastlingLeViT', arch='s'),
             neck=dict(in_channels=[48, 96, 160]))
default_hooks = dict(castling=dict(type='CastlingScheduleHook', fade_start=0.5, fade_end=0.75))
