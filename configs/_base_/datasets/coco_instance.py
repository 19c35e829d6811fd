# COCO 2017 boxes and masks, stock layout under data/coco/.
_base_ = 'mmdet::_base_/datasets/coco_instance.py'
