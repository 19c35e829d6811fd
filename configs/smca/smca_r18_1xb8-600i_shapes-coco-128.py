# SMCA demo on the embedded shapes data (128x128, 3 classes): a small single-scale SMCA trained
# from scratch on a CPU. The first two stages of ResNet-18 (BatchNorm in training mode, no
# pretrained weights; stride 8, a 16 x 16 map),
# 2 encoder + 2 decoder layers of 128 dims and 4 heads, 10 queries (at most 3 shapes an image),
# softmax encoder attention; the heads, losses and matching are those of the COCO configs.
_base_ = [
    '../_base_/datasets/demo_shapes_coco_detection.py', '../_base_/det_runtime.py',
    '../_base_/schedules/demo_600i.py',
]

embed_dims = 128
num_heads = 4
ffn_cfg = dict(embed_dims=embed_dims, feedforward_channels=256, num_fcs=2, ffn_drop=0.0,
               act_cfg=dict(type='ReLU', inplace=True))
attn_cfg = dict(type='SoftmaxAttention')
model = dict(
    type='SMCA', num_queries=10,
    data_preprocessor=dict(type='DetDataPreprocessor', mean=[123.675, 116.28, 103.53],
                           std=[58.395, 57.12, 57.375], bgr_to_rgb=True, pad_size_divisor=1),
    backbone=dict(type='ResNet', depth=18, num_stages=2, strides=(1, 2), dilations=(1, 1),
                  out_indices=(1, ),
                  norm_cfg=dict(type='BN', requires_grad=True), norm_eval=False, style='pytorch',
                  init_cfg=None),
    neck=dict(type='ChannelMapper', in_channels=[128], kernel_size=1, out_channels=embed_dims,
              act_cfg=None, norm_cfg=None, num_outs=1),
    encoder=dict(num_layers=2,
                 layer_cfg=dict(attn_cfg=attn_cfg, embed_dims=embed_dims, num_heads=num_heads,
                                              dropout=0.0, ffn_cfg=ffn_cfg)),
    decoder=dict(
        num_layers=2, return_intermediate=True,
        layer_cfg=dict(
            scale_type='per_head_xy', smooth=8.0,
            self_attn_cfg=dict(embed_dims=embed_dims, num_heads=num_heads, dropout=0.0,
                               batch_first=True),
            cross_attn_cfg=dict(embed_dims=embed_dims, num_heads=num_heads, dropout=0.0,
                                batch_first=True),
            ffn_cfg=ffn_cfg)),
    positional_encoding=dict(num_feats=embed_dims // 2, normalize=True),
    bbox_head=dict(
        type='ConditionalDETRHead', num_classes=3, embed_dims=embed_dims,
        loss_cls=dict(type='FocalLoss', use_sigmoid=True, gamma=2.0, alpha=0.25, loss_weight=2.0),
        loss_bbox=dict(type='L1Loss', loss_weight=5.0),
        loss_iou=dict(type='GIoULoss', loss_weight=2.0)),
    train_cfg=dict(
        assigner=dict(
            type='HungarianAssigner',
            match_costs=[
                dict(type='FocalLossCost', weight=2.0),
                dict(type='BBoxL1Cost', weight=5.0, box_format='xywh'),
                dict(type='IoUCost', iou_mode='giou', weight=2.0)
            ])),
    test_cfg=dict(max_per_img=10))

# DETR-style optimisation: a lower learning rate and tight gradient clipping.
optim_wrapper = dict(optimizer=dict(lr=2e-4, weight_decay=1e-4), clip_grad=dict(max_norm=1.0))
default_hooks = dict(
    logger=dict(interval=10),
    checkpoint=dict(by_epoch=False, interval={{_base_.max_iters}}, max_keep_ckpts=1))
log_processor = dict(by_epoch=False)
