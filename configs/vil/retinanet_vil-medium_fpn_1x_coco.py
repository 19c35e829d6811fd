# RetinaNet with ViL-Medium (arXiv:2103.15358) on COCO, 1x schedule: the ViL-Small recipe with Table
# 9's medium row (drop path 0.2, lr 1e-4); the best checkpoint by box AP is kept, as the paper
# reports it for Medium and Base (App. A.2: the two over-fit COCO); backbone from an ImageNet-21K
# checkpoint (the official file, converted while loading).
_base_ = './retinanet_vil-small_fpn_1x_coco.py'

model = dict(
    backbone=dict(arch='medium', drop_path_rate=0.2,
                  init_cfg=dict(checkpoint='pretrain/vil-medium_in21k.pth')))
default_hooks = dict(checkpoint=dict(save_best='coco/bbox_mAP', rule='greater'))
