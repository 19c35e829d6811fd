# RetinaNet with ViL-Small (Vision Longformer, arXiv:2103.15358) on COCO, 1x schedule (Table 9): AdamW,
# lr 1e-4, weight decay 0.05, gradient clipping at norm 1, drop path 0.1 (the lower end of Table 9's
# [0.1, 0.2]; the 3x+MS config uses the upper end), 12 epochs at (1333, 800). Windows 15 (w=7) in
# every stage, one global token in stages 1-3 (the official detection layout). The backbone starts
# from an ImageNet checkpoint converted by tools/model_converters/vil2mmvisattn.py.
_base_ = [
    'mmdet::_base_/models/retinanet_r50_fpn.py',
    '../_base_/datasets/coco_detection.py',
    '../_base_/schedules/schedule_1x_vil-adamw.py',
    '../_base_/det_runtime.py',
]

model = dict(
    backbone=dict(
        _delete_=True,
        type='ViL',
        arch='small',
        drop_path_rate=0.1,
        out_indices=(1, 2, 3),
        init_cfg=dict(type='Pretrained', checkpoint='pretrain/vil-small_in1k_mmdet.pth')),
    neck=dict(in_channels=[192, 384, 768], start_level=0, add_extra_convs='on_input', num_outs=5))
