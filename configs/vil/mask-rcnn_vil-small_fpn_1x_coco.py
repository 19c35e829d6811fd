# Mask R-CNN with ViL-Small (arXiv:2103.15358) on COCO, 1x schedule: the recipe of
# retinanet_vil-small_fpn_1x_coco.py (Table 9 trains both detectors alike) on the stock
# Mask R-CNN with all four stages into the FPN.
_base_ = [
    'mmdet::_base_/models/mask-rcnn_r50_fpn.py',
    '../_base_/datasets/coco_instance.py',
    '../_base_/schedules/schedule_1x.py',
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

optim_wrapper = dict(
    type='OptimWrapper',
    optimizer=dict(_delete_=True, type='AdamW', lr=1e-4, betas=(0.9, 0.999), weight_decay=0.05),
    clip_grad=dict(max_norm=1.0, norm_type=2),
    paramwise_cfg=dict(custom_keys={
        'norm': dict(decay_mult=0.0),
        'cls_token': dict(decay_mult=0.0),
        'pos_embed': dict(decay_mult=0.0),
        'relative_position': dict(decay_mult=0.0),
    }))
