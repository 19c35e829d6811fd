# A small ViL classifier on the shapes demo's classification split (3 classes, 64x64), the backbone
# of retinanet_vil-demo_fpn_1xb8-600i_shapes-coco-128.py with a global token in its last stage as
# the class token: its checkpoint starts that detector (init_cfg=dict(type='Pretrained',
# checkpoint=...)).
_base_ = ['../_base_/datasets/demo_shapes_imagenet.py', '../_base_/schedules/demo_cls_300i.py']

model = dict(
    type='ImageClassifier',
    backbone=dict(
        type='ViL',
        arch=dict(embed_dims=(32, 64, 128, 256), depths=(1, 1, 3, 1), num_heads=(1, 2, 4, 8),
                  patch_sizes=(4, 2, 2, 2), windows=(7, 7, 7, 7), num_global=(1, 1, 1, 1)),
        drop_path_rate=0.0, out_indices=(3, ), out_type='cls_token'),
    head=dict(type='LinearClsHead', num_classes=3, in_channels=256,
              loss=dict(type='CrossEntropyLoss')))
# the class token learns slowly from scratch: at the schedule's 1e-3 it did not learn within its 300
# iterations
optim_wrapper = dict(optimizer=dict(lr=3e-4), paramwise_cfg=dict(custom_keys={
    'norm': dict(decay_mult=0.0), 'cls_token': dict(decay_mult=0.0),
    'relative_position': dict(decay_mult=0.0),
}))
