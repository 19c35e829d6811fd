# ViL-Base on ImageNet-1k at 224 ("Multi-Scale Vision Longformer", arXiv:2103.15358; Tables 12 and
# 13, 4-stage 1-8-24-1: the tables have no row for it). Recipe of supplementary Table 9: 150 epochs,
# learning rate 0.0008 at batch 1024, cosine decay, weight decay 0.1, drop path 0.1, DeiT's
# augmentation with repeated augmentation (Appendix A: Medium and Base only). The classification
# layout keeps a global token in the last stage, read by the linear head after the final LayerNorm
# ("CLS", Table 10); the detection configs drop it when they load the checkpoint.
_base_ = './vil-medium_8xb128_in1k.py'

model = dict(backbone=dict(arch='base-cls'))
train_cfg = dict(max_epochs=150)
