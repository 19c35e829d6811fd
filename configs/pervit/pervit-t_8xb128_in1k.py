# PerViT-T on ImageNet-1k at 224 ("Peripheral Vision Transformer", arXiv:2206.06801; Table 6 and
# Table A5: 7.6 M, 1.6 GFLOPs, top-1 78.8). Recipe of Table A6: DeiT's, 300 epochs at batch 1024,
# learning rate 5e-4 x batch / 512, weight decay 0.03, 5 warm-up epochs, stochastic depth 0.0,
# RandAugment 9/0.5, Mixup 0.8, CutMix 1.0, label smoothing 0.1. The last stage's output norm,
# average pooling and a linear head, as the official model.
_base_ = '../_base_/imagenet_1k_deit.py'

model = dict(
    backbone=dict(type='PerViT', arch='tiny', out_indices=(3, ), drop_path_rate=0.0),
    head=dict(in_channels=280))
train_dataloader = dict(batch_size=128)
optim_wrapper = dict(optimizer=dict(weight_decay=0.03))
