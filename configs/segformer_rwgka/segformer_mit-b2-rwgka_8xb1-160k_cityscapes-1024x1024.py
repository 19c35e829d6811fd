# SegFormer-B2-RWGKA: the B0-RWGKA recipe with the MiT-B2 encoder (layout of mmseg's B2 config).
_base_ = './segformer_mit-b0-rwgka_8xb1-160k_cityscapes-1024x1024.py'

checkpoint = 'pretrain/mit_b2_rwgka.pth'
model = dict(
    backbone=dict(
        init_cfg=dict(type='Pretrained', checkpoint=checkpoint),
        embed_dims=64,
        num_layers=[3, 4, 6, 3]),
    decode_head=dict(in_channels=[64, 128, 320, 512]))
