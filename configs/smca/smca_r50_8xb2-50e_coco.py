# Single-scale SMCA (Gao et al., ICCV 2021) with a ResNet-50, the baseline of the ripple-attention
# paper (arXiv:2110.02453, C.4, C.6, Table 3: 41.5M, 88 GFLOPs, 41.0 AP at 50 epochs): 6 + 6
# post-norm layers, 8 heads, 256 dims, FFN 2048, dropout 0.1, 300 queries; decoder co-attention
# modulated by per-head Gaussians (smooth 8, x/y scales per head: the official `--dynamic_scale
# type3`). Recipe = mmdet's Conditional DETR 50e (SMCA's own): frozen-BN ResNet-50 from torchvision
# weights, DETR augmentation, AdamW lr 1e-4 (backbone 1e-5), weight decay 1e-4, clip 0.1, lr x0.1 at
# epoch 40, batch 8 x 2; sigmoid focal loss (2), L1 (5), GIoU (2) with Hungarian matching.
_base_ = ['mmdet::conditional_detr/conditional-detr_r50_8xb2-50e_coco.py',
          '../_base_/safeguard_hooks.py']

custom_imports = dict(imports=['mmvisattn'], allow_failed_imports=False)
default_scope = 'mmdet'

attn_cfg = dict(type='SoftmaxAttention')
model = dict(
    type='SMCA', num_queries=300,
    encoder=dict(
        _delete_=True, num_layers=6,
        layer_cfg=dict(
            attn_cfg=attn_cfg, embed_dims=256, num_heads=8, dropout=0.1,
            ffn_cfg=dict(embed_dims=256, feedforward_channels=2048, num_fcs=2, ffn_drop=0.1,
                         act_cfg=dict(type='ReLU', inplace=True)))),
    decoder=dict(
        _delete_=True, num_layers=6, return_intermediate=True,
        layer_cfg=dict(
            scale_type='per_head_xy', smooth=8.0,
            self_attn_cfg=dict(embed_dims=256, num_heads=8, dropout=0.1, batch_first=True),
            cross_attn_cfg=dict(embed_dims=256, num_heads=8, dropout=0.1, batch_first=True),
            ffn_cfg=dict(embed_dims=256, feedforward_channels=2048, num_fcs=2, ffn_drop=0.1,
                         act_cfg=dict(type='ReLU', inplace=True)))),
    # The official PostProcess keeps the top num_queries (300) of the per-class sigmoid scores.
    test_cfg=dict(max_per_img=300))
