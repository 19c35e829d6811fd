# Mask R-CNN with ViL-Small (arXiv:2103.15358) on COCO, 1x schedule: the recipe of
# retinanet_vil-small_fpn_1x_coco.py (Table 9 trains both detectors alike) on the stock
# Mask R-CNN with all four stages into the FPN.
_base_ = [
    'mmdet::_base_/models/mask-rcnn_r50_fpn.py',
    '../_base_/datasets/coco_instance.py',
    '../_base_/schedules/schedule_1x_vil-adamw.py',
    '../_base_/det_runtime.py',
]

model = dict(
    backbone=dict(
        _delete_=True,
        type='ViL',
        arch='small',
        drop_path_rate=0.1,
        out_indices=(0, 1, 2, 3),
        init_cfg=dict(type='Pretrained', checkpoint='pretrain/vil-small_in1k_mmdet.pth')),
    neck=dict(in_channels=[96, 192, 384, 768]))
