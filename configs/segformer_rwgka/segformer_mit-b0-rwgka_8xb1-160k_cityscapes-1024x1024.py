# SegFormer-B0 with random-walk graph kernel attention (RWGK paper, Table 1) on Cityscapes
# 1024x1024: the stock mmseg SegFormer recipe (AdamW 6e-5, poly power 1.0, 160k iterations, batch
# 8x1) with every spatial-reduction attention replaced by RWGK attention (64 learnable anchors per
# head, lam 0.5: Table 5, first row). The paper trains with lr 1e-4 and poly power 0.9 (Sec. 4.1).
_base_ = ['mmseg::segformer/segformer_mit-b0_8xb1-160k_cityscapes-1024x1024.py',
          '../_base_/safeguard_hooks.py']

custom_imports = dict(imports=['mmvisattn'], allow_failed_imports=False)
model = dict(
    backbone=dict(
        type='MixVisionTransformerRWGKA',
        attn_cfg=dict(type='RWGKAttention', num_anchors=64, lam=0.5)))
# The backbone starts from the ImageNet MiT-B0 weights the stock config names (its init_cfg, a URL):
# converted while loading, the RWGK anchors newly initialised.
