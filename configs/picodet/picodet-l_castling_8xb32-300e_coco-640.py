# PicoDet-L at 640 with the castling LeViT-L backbone in place of ESNet-L (same size within 2 %),
# same recipe. CastlingScheduleHook fades the auxiliary softmax branches out between 50 % and
# 75 % of training and removes them, so the last quarter trains the linear-time deploy model; it is
# a key of default_hooks so that it merges with the inherited hooks instead of replacing the EMA.
_base_ = './picodet-l_esnet_8xb32-300e_coco-640.py'

model = dict(backbone=dict(_delete_=True, type='CastlingLeViT', arch='l'),
             neck=dict(in_channels=[80, 160, 320]))
default_hooks = dict(castling=dict(type='CastlingScheduleHook', fade_start=0.5, fade_end=0.75))
