# SMCA-LA (arXiv:2110.02453, Table 3: 41.7M, 79 GFLOPs, 39.1 AP at 50 epochs): SMCA whose encoder
# self-attention is linearized attention with ripple attention's feature map (trigonometric
# random-feature layer with learnable Gaussian-initialised W1, then a fully connected layer and ReLU).
_base_ = './smca_r50_8xb2-50e_coco.py'

model = dict(encoder=dict(layer_cfg=dict(attn_cfg=dict(_delete_=True, type='RippleLinearAttention'))))
