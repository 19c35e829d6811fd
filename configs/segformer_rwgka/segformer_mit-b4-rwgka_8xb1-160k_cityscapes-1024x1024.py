# SegFormer-B4-RWGKA: the B0-RWGKA recipe with the MiT-B4 encoder (layout of mmseg's B4 config).
_base_ = './segformer_mit-b0-rwgka_8xb1-160k_cityscapes-1024x1024.py'

# the ImageNet MiT-B4 weights stock mmseg's B4 SegFormer configs start from, converted
# while loading (the RWGK anchors stay newly initialised)
checkpoint = ('https://download.openmmlab.com/mmsegmentation/v0.5/pretrain/segformer/mit_b4_20220624-d588d980.pth')  # noqa
model = dict(
    backbone=dict(
        init_cfg=dict(type='Pretrained', checkpoint=checkpoint), embed_dims=64,
        num_layers=[3, 8, 27, 3]),
    decode_head=dict(in_channels=[64, 128, 320, 512]))
