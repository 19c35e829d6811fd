# SegFormer-B0-RWGKP: anchors average-pooled from the queries and keys to an 8x8 grid (64 anchors)
# instead of learned (OpenReview, ICLR 2023, Sec. 4.3). Late stages at small inputs have fewer
# tokens than anchors; pooling then repeats tokens, which is legal.
_base_ = './segformer_mit-b0-rwgka_8xb1-160k_cityscapes-1024x1024.py'

model = dict(backbone=dict(attn_cfg=dict(type='RWGKAttention', num_anchors=64, lam=0.5,
                                         anchor_mode='pooled')))
