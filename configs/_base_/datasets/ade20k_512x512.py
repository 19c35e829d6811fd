# ADE20K (SceneParse150), 512x512 crops, stock layout under data/ade/ADEChallengeData2016/.
_base_ = 'mmseg::_base_/datasets/ade20k.py'
