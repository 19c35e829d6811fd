# Mask2Former with a plain ViT-B/16 (softmax attention) on ADE20K 512x512: the softmax baseline of
# Castling-ViT (arXiv:2211.10526). mmseg's Mask2Former ADE20K recipe (AdamW 1e-4, poly, 160k
# iterations, batch 8x2); the single-scale ViT features of blocks 4, 6, 8 and 12 become a stride
# 4-32 pyramid through mmseg's MultiLevelNeck (512 channels, which puts the whole model at the
# slides' 118M). Start from MAE's ImageNet ViT-B/16 weights by URL (facebookresearch/mae), converted
# while loading (the same keys serve the softmax ViT: qkv, proj) with the 14x14 position embedding
# resized to 32x32.
_base_ = ['mmseg::mask2former/mask2former_r50_8xb2-160k_ade20k-512x512.py',
          '../_base_/safeguard_hooks.py']

custom_imports = dict(imports=['mmvisattn'], allow_failed_imports=False)
checkpoint = 'https://dl.fbaipublicfiles.com/mae/pretrain/mae_pretrain_vit_base.pth'
model = dict(
    backbone=dict(
        _delete_=True, type='CastlingViT', attn_cfg=dict(type='SoftmaxAttention'),
        img_size=(512, 512), patch_size=16, embed_dims=768, num_layers=12, num_heads=12,
        mlp_ratio=4, out_indices=(3, 5, 7, 11), qkv_bias=True, patch_bias=True, drop_path_rate=0.1,
        norm_cfg=dict(type='LN', eps=1e-6), interpolate_mode='bicubic',
        init_cfg=dict(type='Pretrained', checkpoint=checkpoint)),
    neck=dict(type='MultiLevelNeck', in_channels=[768, 768, 768, 768], out_channels=512,
              scales=[4, 2, 1, 0.5]),
    decode_head=dict(in_channels=[512, 512, 512, 512]))

# MAE's fine-tuning recipe (arXiv:2111.06377, Appendix A.1): layer-wise learning-rate decay, at
# mmseg's MAE UperNet ADE20K rate of 0.65 over the 12 layers; the embeddings learn at lr * 0.65 **
# 13, layer i at lr * 0.65 ** (12 - i), the pixel decoder and the heads at lr
optim_wrapper = dict(
    constructor='BackboneLayerDecayOptimWrapperConstructor',
    paramwise_cfg=dict(_delete_=True, layer_decay_rate=0.65, norm_decay_mult=0.0, custom_keys={
        'backbone.pos_embed': dict(decay_mult=0.0), 'backbone.cls_token': dict(decay_mult=0.0),
        'query_embed': dict(decay_mult=0.0), 'query_feat': dict(decay_mult=0.0),
        'level_embed': dict(decay_mult=0.0),
    }))
