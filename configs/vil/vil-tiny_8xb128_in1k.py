# ViL-Tiny on ImageNet-1k at 224 ("Multi-Scale Vision Longformer", arXiv:2103.15358; Tables 12 and
# 13, 4-stage 1-1-9-1: 6.7 M parameters, 1.33 GFLOPs, top-1 76.18). Recipe of supplementary Table 9:
# 300 epochs, learning rate 0.001 at batch 1024, cosine decay, weight decay 0.1, drop path 0.1,
# DeiT's augmentation (no repeated
# augmentation: Appendix A uses it for Medium and Base only). The classification layout keeps a
# global token in the last stage, read by the linear head after the final LayerNorm ("CLS", Table
# 10); the detection configs drop it when they load the checkpoint.
_base_ = '../_base_/imagenet_1k_deit.py'

model = dict(
    backbone=dict(type='ViL', arch='tiny-cls', out_indices=(3, ), out_type='cls_token',
                  drop_path_rate=0.1),
    neck=None, head=dict(in_channels=384))
train_dataloader = dict(batch_size=128)
optim_wrapper = dict(optimizer=dict(lr=0.001, weight_decay=0.1))
