# UperNet with PerViT-Small (arXiv:2206.06801) on ADE20K 512x512; as the Tiny config with the Small
# widths (Table A5) and stochastic depth 0.2.
_base_ = './upernet_pervit-t_8xb2-160k_ade20k-512x512.py'

stage_channels = [320, 368, 464, 464]
model = dict(
    backbone=dict(arch='small', drop_path_rate=0.2,
                  init_cfg=dict(type='Pretrained', checkpoint='pretrain/pervit-s_in1k.pth')),
    neck=[
        dict(type='mmdet.ChannelMapper', in_channels=stage_channels, out_channels=256,
             kernel_size=1, act_cfg=None, norm_cfg=dict(type='SyncBN', requires_grad=True)),
        dict(type='Feature2Pyramid', embed_dim=256, rescales=[4, 2, 1, 0.5]),
    ])
