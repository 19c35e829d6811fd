# SegFormer-B5-RWGKA: the B0-RWGKA recipe with the MiT-B5 encoder (layout of mmseg's B5 config).
_base_ = './segformer_mit-b0-rwgka_8xb1-160k_cityscapes-1024x1024.py'

# the ImageNet MiT-B5 weights stock mmseg's B5 SegFormer configs start from, converted
# while loading (the RWGK anchors stay newly initialised)
checkpoint = ('https://download.openmmlab.com/mmsegmentation/v0.5/pretrain/segformer/mit_b5_20220624-658746d9.pth')  # noqa
model = dict(
    backbone=dict(
        init_cfg=dict(type='Pretrained', checkpoint=checkpoint), embed_dims=64,
        num_layers=[3, 6, 40, 3]),
    decode_head=dict(in_channels=[64, 128, 320, 512]))
