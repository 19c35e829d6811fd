# MiT-B0 with random-walk graph kernel attention ("Improving vision attention with random walk graph
# kernel", OpenReview, ICLR 2023; 64 anchors and lambda 0.5 as the segmentation configs) on
# ImageNet-1k at 224. The paper reports ImageNet for CvT / ViL-RWGKP, not MiT: no target. SegFormer
# pretrains MiT with PVT's recipe, which is DeiT's (300 epochs at batch 1024, drop path 0.1); the
# last stage's output norm, average pooling and a linear head.
_base_ = '../_base_/imagenet_1k_deit.py'

model = dict(
    backbone=dict(
        type='MixVisionTransformerRWGKA',
        attn_cfg=dict(type='RWGKAttention', num_anchors=64, lam=0.5), embed_dims=32,
        num_heads=[1, 2, 5, 8], num_layers=[2, 2, 2, 2], out_indices=(3, ), drop_path_rate=0.1),
    head=dict(in_channels=256))
train_dataloader = dict(batch_size=128)
