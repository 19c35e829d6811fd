# DeiT's ImageNet-1k schedule ("Training data-efficient image transformers & distillation through
# attention", arXiv:2012.12877, Table 9), which the ViL, PerViT and ripple papers follow: AdamW,
# learning rate 5e-4 x batch / 512 (1e-3 at the total batch of 1024), weight decay 0.05, 5 epochs of
# linear warm-up, cosine decay over 300 epochs. mmpretrain's Swin schedule with DeiT's warm-up.
_base_ = ['mmpretrain::_base_/schedules/imagenet_bs1024_adamw_swin.py']

optim_wrapper = dict(optimizer=dict(lr=1e-3, weight_decay=0.05))
warmup_epochs = 5
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-3, by_epoch=True, end=warmup_epochs,
         convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True, begin=warmup_epochs),
]
