# Mask R-CNN with ViL-Base (arXiv:2103.15358) on COCO, 3x+MS schedule: the ViL-Medium recipe (Table
# 9 gives the two sizes the same drop path; the best checkpoint by box AP is kept) with lr 8e-5 and
# a backbone from an ImageNet-21K checkpoint (the official file, converted while loading).
_base_ = './mask-rcnn_vil-medium_fpn_ms-3x_coco.py'

model = dict(backbone=dict(arch='base', init_cfg=dict(checkpoint='pretrain/vil-base_in21k.pth')))
optim_wrapper = dict(optimizer=dict(lr=8e-5))
