# RetinaNet with ViL-Small (Multi-Scale Vision Longformer, arXiv:2103.15358) on COCO, 3x+MS schedule
# (Table 9): 270k iterations at batch 16 with the shorter side drawn from 640-800, drop path 0.2
# (the upper end of Table 9's range for the longer schedule).
_base_ = [
    '../_base_/models/retinanet_vil-small_fpn.py',
    '../_base_/datasets/coco_detection_ms.py',
    '../_base_/schedules/schedule_3x_vil-adamw.py',
    '../_base_/det_runtime_iter.py',
]

model = dict(backbone=dict(drop_path_rate=0.2))
