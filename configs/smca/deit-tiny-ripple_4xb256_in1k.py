# DeiT-Tiny-Ripple on ImageNet-1k at 224 ("Ripple attention for visual perception with sub-quadratic
# complexity", arXiv:2110.02453; Table 1: 5.78 M parameters, top-1 73.02): ripple attention in the 9
# lower layers, linearized attention above, no class token (the tokens are mean-pooled, C.5). DeiT's
# recipe, 300 epochs without repeated augmentation (C.4), at DeiT-Tiny's batch of 4 x 256.
_base_ = '../_base_/imagenet_1k_deit.py'

model = dict(
    backbone=dict(type='DeiTRipple', img_size=224, out_type='avg_featmap'), neck=None,
    head=dict(in_channels=192))
train_dataloader = dict(batch_size=256)
