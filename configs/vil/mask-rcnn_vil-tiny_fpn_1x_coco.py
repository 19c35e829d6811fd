# Mask R-CNN with ViL-Tiny (arXiv:2103.15358) on COCO, 1x schedule: the ViL-Small recipe with Table
# 9's tiny row (drop path 0.05, lr 1e-4); backbone from an ImageNet-1K checkpoint (the official
# file, converted while loading).
_base_ = './mask-rcnn_vil-small_fpn_1x_coco.py'

model = dict(
    backbone=dict(arch='tiny', drop_path_rate=0.05,
                  init_cfg=dict(checkpoint='pretrain/vil-tiny_in1k.pth')),
    neck=dict(in_channels=[48, 96, 192, 384]))
