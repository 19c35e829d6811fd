# ViL-Base on ImageNet-21k at 224 ("Multi-Scale Vision Longformer", arXiv:2103.15358), with the
# recipe of the Medium one (supplementary Table 9 gives both the same); the checkpoint starts the
# *_vil-base_* detection configs.
_base_ = './vil-medium_8xb128_in21k.py'

model = dict(backbone=dict(arch='base-cls'))
