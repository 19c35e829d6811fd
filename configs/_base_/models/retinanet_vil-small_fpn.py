# mmdet's RetinaNet with a ViL-Small backbone (Multi-Scale Vision Longformer, arXiv:2103.15358):
# windows 15 (w=7) in every stage, one global token in stages 1-3 (the official detection layout),
# drop path 0.1 (the lower end of Table 9's range); stages 2-4 feed the FPN, whose P6/P7 come from
# its input. The backbone starts from an ImageNet checkpoint (the official
# file, converted while loading).
_base_ = 'mmdet::_base_/models/retinanet_r50_fpn.py'

model = dict(
    backbone=dict(_delete_=True, type='ViL', arch='small', drop_path_rate=0.1,
                  out_indices=(1, 2, 3),
                  init_cfg=dict(type='Pretrained', checkpoint='pretrain/vil-small_in1k.pth')),
    neck=dict(in_channels=[192, 384, 768], start_level=0, add_extra_convs='on_input', num_outs=5))
