# SegFormer-B5-RWGKA: the B0-RWGKA recipe with the MiT-B5 encoder (layout of mmseg's B5 config).
_base_ = './segformer_mit-b0-rwgka_8xb1-160k_cityscapes-1024x1024.py'

checkpoint = 'pretrain/mit_b5_rwgka.pth'
model = dict(
    backbone=dict(
        init_cfg=dict(type='Pretrained', checkpoint=checkpoint),
        embed_dims=64,
        num_layers=[3, 6, 40, 3]),
    decode_head=dict(in_channels=[64, 128, 320, 512]))
