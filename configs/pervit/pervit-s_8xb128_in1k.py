# PerViT-S on ImageNet-1k at 224 ("Peripheral Vision Transformer", arXiv:2206.06801; Table 6 and
# Table A5: 21.3 M, 4.4 GFLOPs, top-1 82.1). Recipe of Table A6: DeiT's, 300 epochs at batch 1024,
# learning rate 5e-4 x batch / 512, weight decay 0.05, 5 warm-up epochs, stochastic depth 0.1,
# RandAugment 9/0.5, Mixup 0.8, CutMix 1.0, label smoothing 0.1. The last stage's output norm,
# average pooling and a linear head, as the official model.
_base_ = './pervit-t_8xb128_in1k.py'

model = dict(backbone=dict(arch='small', drop_path_rate=0.1), head=dict(in_channels=464))
optim_wrapper = dict(optimizer=dict(weight_decay=0.05))
