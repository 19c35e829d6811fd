# mmdet's Mask R-CNN with a ViL-Small backbone (arXiv:2103.15358), the layout of
# retinanet_vil-small_fpn.py with all four stages into the FPN.
_base_ = 'mmdet::_base_/models/mask-rcnn_r50_fpn.py'

model = dict(
    backbone=dict(_delete_=True, type='ViL', arch='small', drop_path_rate=0.1,
                  out_indices=(0, 1, 2, 3),
                  init_cfg=dict(type='Pretrained', checkpoint='pretrain/vil-small_in1k.pth')),
    neck=dict(in_channels=[96, 192, 384, 768]))
