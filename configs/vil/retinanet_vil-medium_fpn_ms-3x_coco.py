# RetinaNet with ViL-Medium (arXiv:2103.15358) on COCO, 3x+MS schedule: the ViL-Small 3x+MS recipe
# (multi-scale training, 36 epochs) with Table 9's medium row (drop path 0.3, lr 1e-4).
_base_ = './retinanet_vil-small_fpn_ms-3x_coco.py'

model = dict(
    backbone=dict(
        arch='medium',
        drop_path_rate=0.3,
        init_cfg=dict(type='Pretrained', checkpoint='pretrain/vil-medium_in21k_mmdet.pth')))
