# PerViT-M on ImageNet-1k at 224 ("Peripheral Vision Transformer", arXiv:2206.06801; Table 6 and
# Table A5: 43.7 M, 9.0 GFLOPs, top-1 82.9). Recipe of Table A6: DeiT's, 300 epochs at batch 1024,
# learning rate 5e-4 x batch / 512, weight decay 0.05, 20 warm-up epochs, stochastic depth 0.2,
# RandAugment 9/0.5, Mixup 0.8, CutMix 1.0, label smoothing 0.1. The last stage's output norm,
# average pooling and a linear head, as the official model.
_base_ = './pervit-s_8xb128_in1k.py'

model = dict(backbone=dict(arch='medium', drop_path_rate=0.2), head=dict(in_channels=684))
warmup_epochs = 20
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-3, by_epoch=True, end=warmup_epochs,
         convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True, begin=warmup_epochs),
]
