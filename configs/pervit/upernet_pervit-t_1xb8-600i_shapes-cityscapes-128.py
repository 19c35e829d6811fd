# UperNet with PerViT-Tiny from scratch on the Cityscapes-layout shapes data (128x128): the
# segmentation demo of configs/demo (AdamW 1e-3, 600 iterations of batch 8, head lr x10) with
# PerViT-T, the simple feature pyramid of the ADE20K configs and a 128-channel UperNet head, all
# with BatchNorm for a single process. 128x128 images give an 8x8 token grid.
_base_ = '../demo/segformer_mit-b0_1xb8-600i_shapes-cityscapes-128.py'

norm_cfg = dict(type='BN', requires_grad=True)
model = dict(
    backbone=dict(_delete_=True, type='PerViT', arch='tiny', out_indices=(0, 1, 2, 3),
                  norm_cfg=norm_cfg),
    neck=[
        dict(type='mmdet.ChannelMapper', in_channels=[192, 224, 280, 280], out_channels=128,
             kernel_size=1, act_cfg=None, norm_cfg=norm_cfg),
        dict(type='Feature2Pyramid', embed_dim=128, rescales=[4, 2, 1, 0.5], norm_cfg=norm_cfg),
    ],
    decode_head=dict(
        _delete_=True, type='UPerHead', in_channels=[128, 128, 128, 128], in_index=[0, 1, 2, 3],
        pool_scales=(1, 2, 3, 6), channels=128, dropout_ratio=0.1, num_classes=4, norm_cfg=norm_cfg,
        align_corners=False,
        loss_decode=dict(type='CrossEntropyLoss', use_sigmoid=False, loss_weight=1.0)))
optim_wrapper = dict(paramwise_cfg=dict(custom_keys={'rpe_proj': dict(decay_mult=0.0),
                                                     '.position.': dict(decay_mult=0.0)}))
