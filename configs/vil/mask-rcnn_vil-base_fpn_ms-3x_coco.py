# Mask R-CNN with ViL-Base (arXiv:2103.15358) on COCO, 3x+MS schedule: the ViL-Small 3x+MS recipe
# (multi-scale training, 36 epochs) with Table 9's base row (drop path 0.3, lr 8e-5).
_base_ = './mask-rcnn_vil-small_fpn_ms-3x_coco.py'

model = dict(
    backbone=dict(
        arch='base',
        drop_path_rate=0.3,
        init_cfg=dict(type='Pretrained', checkpoint='pretrain/vil-base_in21k_mmdet.pth')))

optim_wrapper = dict(optimizer=dict(lr=8e-5))
