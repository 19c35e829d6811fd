# Demo: RetinaNet with a small Vision Longformer trained from scratch on the embedded shapes data
# (python tools/misc/make_demo_data.py --out data/shapes), the recipe of the stock demo
# (configs/demo/retinanet_r18_fpn_1xb8-600i_shapes-coco-128.py: AdamW lr 1e-3, 600 iterations of
# batch 8 at 128x128). The layout is a four-stage ViL narrower and shallower than ViL-Tiny, with
# the Table 15 window (w = 7, so the 32x32 first stage is 5x5 chunks) and one global token in
# stages 1-3; the last stage (4x4) is covered by one window. FPN and head run at 128 channels
# (stock 256): on CPU the head's convolutions, not the backbone, dominate the step time.
_base_ = '../demo/retinanet_r18_fpn_1xb8-600i_shapes-coco-128.py'

model = dict(
    backbone=dict(
        _delete_=True, type='ViL',
        arch=dict(embed_dims=(32, 64, 128, 256), depths=(1, 1, 3, 1), num_heads=(1, 2, 4, 8),
                  patch_sizes=(4, 2, 2, 2), windows=(7, 7, 7, 7), num_global=(1, 1, 1, 0)),
        drop_path_rate=0.0, out_indices=(1, 2, 3)),
    neck=dict(in_channels=[64, 128, 256], out_channels=128, start_level=0,
              add_extra_convs='on_input', num_outs=5),
    bbox_head=dict(in_channels=128, feat_channels=128))

optim_wrapper = dict(paramwise_cfg=dict(custom_keys={
    'norm': dict(decay_mult=0.0), 'cls_token': dict(decay_mult=0.0),
    'relative_position': dict(decay_mult=0.0),
}))
