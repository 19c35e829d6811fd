# ViL-Medium on ImageNet-21k at 224 ("Multi-Scale Vision Longformer", arXiv:2103.15358): the
# pretraining of the Medium and Base COCO models (Table 14's note). Recipe of supplementary Table 9:
# 90 epochs, learning rate 5e-4 at batch 1024, cosine decay, weight decay 0.1, drop path 0.1, DeiT's
# augmentation; mmpretrain's ImageNet21k dataset (data/imagenet21k, 21,842 classes, no validation
# split). The checkpoint starts the *_vil-medium_* detection configs as the ImageNet-1k one does.
_base_ = './vil-medium_8xb128_in1k.py'

num_classes = 21842
data_preprocessor = dict(num_classes=num_classes)
model = dict(head=dict(num_classes=num_classes))
train_dataloader = dict(dataset=dict(_delete_=True, type='ImageNet21k',
                                     data_root='data/imagenet21k', split='train',
                                     pipeline={{_base_.train_pipeline}}))
val_dataloader = None
val_cfg = None
val_evaluator = None
test_dataloader = None
test_cfg = None
test_evaluator = None
optim_wrapper = dict(optimizer=dict(lr=5e-4))
train_cfg = dict(max_epochs=90)
