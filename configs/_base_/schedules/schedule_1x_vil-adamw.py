# The 1x schedule with ViL's optimizer (Table 9 of arXiv:2103.15358, shared by its RetinaNet and
# Mask R-CNN recipes): AdamW, lr 1e-4, weight decay 0.05, gradient clipping at norm 1, and no weight
# decay on norms, global tokens and relative-position tables (as the official code).
_base_ = './schedule_1x.py'

optim_wrapper = dict(
    type='OptimWrapper',
    optimizer=dict(_delete_=True, type='AdamW', lr=1e-4, betas=(0.9, 0.999), weight_decay=0.05),
    clip_grad=dict(max_norm=1.0, norm_type=2),
    paramwise_cfg=dict(custom_keys={
        'norm': dict(decay_mult=0.0),
        'cls_token': dict(decay_mult=0.0),
        'pos_embed': dict(decay_mult=0.0),
        'relative_position': dict(decay_mult=0.0),
    }))
