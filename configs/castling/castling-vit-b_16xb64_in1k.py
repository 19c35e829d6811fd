# Castling-ViT-B/16 on ImageNet-1k at 224 (arXiv:2211.10526; the talk gives no ImageNet result, so
# no target): DeiT-B's sizes and recipe (arXiv:2012.12877: 300 epochs at batch 1024, drop path 0.1)
# with linear-angular attention, a (9, 1) depthwise conv along the tokens and the auxiliary masked
# softmax branch, which CastlingScheduleHook fades out over the third quarter of training and then
# removes. The class token, after the final LayerNorm, feeds the linear head (DeiT's).
_base_ = '../_base_/imagenet_1k_deit.py'

model = dict(
    backbone=dict(
        type='CastlingViT',
        attn_cfg=dict(type='LinearAngularAttention', conv='tokens', kernel_size=9), img_size=224,
        patch_size=16, embed_dims=768, num_layers=12, num_heads=12, qkv_bias=True, patch_bias=True,
        drop_path_rate=0.1, with_cls_token=True, output_cls_token=True, final_norm=True,
        norm_cfg=dict(type='LN', eps=1e-6), interpolate_mode='bicubic'),
    neck=None, head=dict(type='VisionTransformerClsHead', in_channels=768))
train_dataloader = dict(batch_size=64)
optim_wrapper = dict(
    paramwise_cfg=dict(custom_keys={'.cls_token': dict(decay_mult=0.0),
                                    '.pos_embed': dict(decay_mult=0.0)}),
    clip_grad=dict(max_norm=5.0))
default_hooks = dict(castling=dict(type='CastlingScheduleHook', fade_start=0.5, fade_end=0.75))
