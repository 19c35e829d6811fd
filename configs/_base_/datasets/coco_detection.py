# COCO 2017 boxes, stock layout under data/coco/ (train2017/, val2017/, annotations/).
_base_ = 'mmdet::_base_/datasets/coco_detection.py'
