# Segmentation demo of the castling backbone: CastlingLeViT-S (strides 8-32) with mmseg's all-MLP
# SegFormer head, from scratch on the Cityscapes-layout shapes data (128x128), trained like the
# stock SegFormer demo. A Mask2Former head does not learn within a CPU demo's minutes; the COCO and
# ADE20K configs of this folder and configs/picodet/ carry the full models. The auxiliary softmax
# branches fade out between 50 % and 75 % of training and are removed for the rest and for testing.
_base_ = '../demo/segformer_mit-b0_1xb8-600i_shapes-cityscapes-128.py'

model = dict(
    backbone=dict(_delete_=True, type='CastlingLeViT', arch='s'),
    decode_head=dict(in_channels=[48, 96, 160], in_index=[0, 1, 2], channels=128))
default_hooks = dict(castling=dict(type='CastlingScheduleHook', fade_start=0.5, fade_end=0.75))
