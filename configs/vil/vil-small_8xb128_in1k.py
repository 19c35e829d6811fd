# ViL-Small on ImageNet-1k at 224 ("Multi-Scale Vision Longformer", arXiv:2103.15358; Tables 12 and
# 13, 4-stage 1-2-8-1: 24.6 M, 4.86 GFLOPs, top-1 81.99). Recipe of supplementary Table 9: 300
# epochs, learning rate 0.001 at batch 1024, cosine decay, weight decay 0.1, drop path 0.1, DeiT's
# augmentation (no repeated augmentation: Appendix A uses it for Medium and Base only). The
# classification layout keeps a global token in the last stage, read by the linear head after the
# final LayerNorm ("CLS", Table 10); the detection configs drop it when they load the checkpoint.
_base_ = './vil-tiny_8xb128_in1k.py'

model = dict(backbone=dict(arch='small-cls'), head=dict(in_channels=768))
