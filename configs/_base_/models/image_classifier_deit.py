# An ImageNet-1k classifier with DeiT's training-time regularisers (arXiv:2012.12877, Table 9):
# label smoothing 0.1, Mixup 0.8 and CutMix 1.0 on the batch (RandAugment and random erasing are in
# the data pipeline); average pooling into a linear head. Each config names the backbone and the
# head's width.
model = dict(
    type='ImageClassifier',
    backbone=dict(),  # each config's
    neck=dict(type='GlobalAveragePooling'),
    head=dict(type='LinearClsHead', num_classes=1000, in_channels=None,
              loss=dict(type='LabelSmoothLoss', label_smooth_val=0.1, mode='original'),
              topk=(1, 5)),
    train_cfg=dict(augments=[dict(type='Mixup', alpha=0.8), dict(type='CutMix', alpha=1.0)]),
)
