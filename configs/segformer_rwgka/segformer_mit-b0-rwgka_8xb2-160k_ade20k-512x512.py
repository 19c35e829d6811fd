# SegFormer-B0-RWGKA on ADE20K 512x512: the stock mmseg SegFormer ADE20K recipe (AdamW 6e-5,
# poly power 1.0, 160k iterations, batch 8x2) with RWGK attention in every block.
_base_ = ['mmseg::segformer/segformer_mit-b0_8xb2-160k_ade20k-512x512.py',
          '../_base_/safeguard_hooks.py']

custom_imports = dict(imports=['mmvisattn'], allow_failed_imports=False)
model = dict(
    backbone=dict(
        type='MixVisionTransformerRWGKA',
        attn_cfg=dict(type='RWGKAttention', num_anchors=64, lam=0.5)))
# The backbone starts from the ImageNet MiT-B0 weights the stock config names (its init_cfg, a URL):
# converted while loading, the RWGK anchors newly initialised.
