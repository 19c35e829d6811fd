# SegFormer-B1-RWGKA: the B0-RWGKA recipe with the MiT-B1 encoder (layout of mmseg's B1 config).
_base_ = './segformer_mit-b0-rwgka_8xb2-160k_ade20k-512x512.py'

# the ImageNet MiT-B1 weights stock mmseg's B1 SegFormer configs start from, converted
# while loading (the RWGK anchors stay newly initialised)
checkpoint = ('https://download.openmmlab.com/mmsegmentation/v0.5/pretrain/segformer/mit_b1_20220624-02e5a6a1.pth')  # noqa
model = dict(
    backbone=dict(
        init_cfg=dict(type='Pretrained', checkpoint=checkpoint), embed_dims=64,
        num_layers=[2, 2, 2, 2]),
    decode_head=dict(in_channels=[64, 128, 320, 512]))
