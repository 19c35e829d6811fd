# DeiT's ImageNet-1k recipe (arXiv:2012.12877, Table 9), which every *_in1k.py config of the project
# starts from: mmpretrain's DeiT data pipeline, a classifier with DeiT's regularisers, DeiT's
# schedule and the project's runtime. Each config names its backbone and changes what its paper's
# recipe changes.
_base_ = [
    './models/image_classifier_deit.py', 'mmpretrain::_base_/datasets/imagenet_bs64_swin_224.py',
    './schedules/imagenet_bs1024_adamw_deit.py', './cls_runtime.py',
]
