# RetinaNet with ViL-Tiny (arXiv:2103.15358) on COCO, 3x+MS schedule: the ViL-Small recipe with
# Table 9's tiny row (drop path 0.1, lr 1e-4); backbone from an ImageNet-1K checkpoint (the official
# file, converted while loading).
_base_ = './retinanet_vil-small_fpn_ms-3x_coco.py'

model = dict(
    backbone=dict(arch='tiny', drop_path_rate=0.1,
                  init_cfg=dict(checkpoint='pretrain/vil-tiny_in1k.pth')),
    neck=dict(in_channels=[96, 192, 384]))
