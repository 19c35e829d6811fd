# Mask2Former with Castling-ViT-B/16 on ADE20K 512x512 (arXiv:2211.10526): the softmax ViT-B
# baseline with linear-angular attention, a (9, 1) depthwise conv along the tokens and the auxiliary
# masked softmax branch in every block. CastlingScheduleHook keeps the branch at full weight for the
# first half of training, fades it to zero by 3/4 and then removes it (switch_to_deploy), so the
# second quarter of training and every evaluation after it run the linear-time model.
_base_ = './mask2former_vit-b_8xb2-160k_ade20k-512x512.py'

model = dict(backbone=dict(attn_cfg=dict(type='LinearAngularAttention', conv='tokens',
                                         kernel_size=9)))
default_hooks = dict(castling=dict(type='CastlingScheduleHook', fade_start=0.5, fade_end=0.75))
