# SegFormer-B0-RWGKA from scratch on the Cityscapes-layout shapes data (128x128): the stock
# SegFormer-B0 demo with RWGK attention (64 learnable anchors, lam 0.5) in every block.
_base_ = '../demo/segformer_mit-b0_1xb8-600i_shapes-cityscapes-128.py'

model = dict(
    backbone=dict(
        type='MixVisionTransformerRWGKA',
        attn_cfg=dict(type='RWGKAttention', num_anchors=64, lam=0.5)))
