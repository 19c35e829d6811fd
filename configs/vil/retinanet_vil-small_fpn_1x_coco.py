# RetinaNet with ViL-Small (Multi-Scale Vision Longformer, arXiv:2103.15358) on COCO, 1x schedule
# (Table 9): 90k iterations at batch 16 at (1333, 800), drop path 0.1 (the lower end of Table 9's
# range).
_base_ = [
    '../_base_/models/retinanet_vil-small_fpn.py',
    '../_base_/datasets/coco_detection.py',
    '../_base_/schedules/schedule_1x_vil-adamw.py',
    '../_base_/det_runtime_iter.py',
]
