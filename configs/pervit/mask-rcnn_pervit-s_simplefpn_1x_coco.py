# Mask R-CNN with PerViT-Small (arXiv:2206.06801) on COCO, 1x schedule; as the Tiny config with the
# Small widths (Table A5) and stochastic depth 0.2.
_base_ = './mask-rcnn_pervit-t_simplefpn_1x_coco.py'

stage_channels = [320, 368, 464, 464]
model = dict(
    backbone=dict(arch='small', drop_path_rate=0.2,
                  init_cfg=dict(type='Pretrained', checkpoint='pretrain/pervit-s_in1k.pth')),
    neck=[
        dict(type='ChannelMapper', in_channels=stage_channels, out_channels=256, kernel_size=1,
             act_cfg=None, norm_cfg=dict(type='GN', num_groups=32)),
        dict(type='mmseg.Feature2Pyramid', embed_dim=256, rescales=[4, 2, 1, 0.5],
             norm_cfg=dict(type='GN', num_groups=32)),
        dict(type='FPN', in_channels=[256, 256, 256, 256], out_channels=256, num_outs=5),
    ])
