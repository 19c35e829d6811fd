# Cityscapes fine annotations (labelTrainIds), 1024x1024 crops, stock layout under data/cityscapes/.
_base_ = 'mmseg::_base_/datasets/cityscapes_1024x1024.py'
