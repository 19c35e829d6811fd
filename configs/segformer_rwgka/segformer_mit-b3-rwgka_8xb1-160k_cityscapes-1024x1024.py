# SegFormer-B3-RWGKA: the B0-RWGKA recipe with the MiT-B3 encoder (layout of mmseg's B3 config).
_base_ = './segformer_mit-b0-rwgka_8xb1-160k_cityscapes-1024x1024.py'

# the ImageNet MiT-B3 weights stock mmseg's B3 SegFormer configs start from, converted
# while loading (the RWGK anchors stay newly initialised)
checkpoint = ('https://download.openmmlab.com/mmsegmentation/v0.5/pretrain/segformer/mit_b3_20220624-13b1141c.pth')  # noqa
model = dict(
    backbone=dict(
        init_cfg=dict(type='Pretrained', checkpoint=checkpoint), embed_dims=64,
        num_layers=[3, 4, 18, 3]),
    decode_head=dict(in_channels=[64, 128, 320, 512]))
