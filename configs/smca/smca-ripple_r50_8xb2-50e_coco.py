# SMCA-Ripple (arXiv:2110.02453, Table 3: 41.8M, 80 GFLOPs, 40.5 AP at 50 epochs): SMCA whose
# encoder self-attention is ripple attention in every layer (stick-breaking spatial weights over
# vicinal groups, R_max and tau at the module's defaults).
_base_ = './smca_r50_8xb2-50e_coco.py'

# The encoder's dropout (0.1) still applies to the attention output; attention-weight dropout
# does not exist in the linear form (the weights are never formed), so it is 0, said explicitly
# (the module refuses a non-zero value rather than ignore it).
model = dict(encoder=dict(layer_cfg=dict(attn_cfg=dict(_delete_=True, type='RippleAttention',
                                                       attn_drop=0.0))))
