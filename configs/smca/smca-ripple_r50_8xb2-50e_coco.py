# SMCA-Ripple (arXiv:2110.02453, Table 3: 41.8M, 80 GFLOPs, 40.5 AP at 50 epochs): SMCA whose encoder
# self-attention is ripple attention in every layer (stick-breaking spatial weights over vicinal
# groups, R_max and tau at the module's defaults).
_base_ = './smca_r50_8xb2-50e_coco.py'

model = dict(encoder=dict(layer_cfg=dict(attn_cfg=dict(_delete_=True, type='RippleAttention'))))
