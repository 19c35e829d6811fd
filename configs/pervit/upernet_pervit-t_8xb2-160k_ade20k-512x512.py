# UperNet with PerViT-Tiny (arXiv:2206.06801) on ADE20K 512x512, 160k iterations of batch 8x2 (the
# mmseg Swin-UperNet recipe: AdamW 6e-5, 1500 warm-up iterations, poly decay). The four stride-16
# stage outputs become a stride 4-32 pyramid through stock parts: mmdet's ChannelMapper (1x1 convs
# to a common width) and mmseg's Feature2Pyramid (ViTDet-style deconvolutions and max-pool). Start
# from ImageNet weights converted by tools/model_converters/pervit2mmvisattn.py.
_base_ = [
    'mmseg::_base_/models/upernet_r50.py', '../_base_/datasets/ade20k_512x512.py',
    '../_base_/schedules/schedule_160k.py', '../_base_/seg_runtime.py',
]

crop_size = (512, 512)
stage_channels = [192, 224, 280, 280]
data_preprocessor = dict(size=crop_size)
model = dict(
    data_preprocessor=data_preprocessor, pretrained=None,
    backbone=dict(
        _delete_=True, type='PerViT', arch='tiny', drop_path_rate=0.1, out_indices=(0, 1, 2, 3),
        norm_cfg=dict(type='SyncBN', requires_grad=True),
        init_cfg=dict(type='Pretrained', checkpoint='pretrain/pervit-t_in1k.pth')),
    neck=[
        dict(type='mmdet.ChannelMapper', in_channels=stage_channels, out_channels=256,
             kernel_size=1, act_cfg=None, norm_cfg=dict(type='SyncBN', requires_grad=True)),
        dict(type='Feature2Pyramid', embed_dim=256, rescales=[4, 2, 1, 0.5]),
    ],
    decode_head=dict(in_channels=[256, 256, 256, 256], num_classes=150),
    auxiliary_head=dict(in_channels=256, num_classes=150))

optim_wrapper = dict(
    _delete_=True, type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=6e-5, betas=(0.9, 0.999), weight_decay=0.01),
    paramwise_cfg=dict(custom_keys={'norm': dict(decay_mult=0.0), 'rpe_proj': dict(decay_mult=0.0),
                                    '.position.': dict(decay_mult=0.0)}))
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6, by_epoch=False, begin=0, end=1500),
    dict(type='PolyLR', eta_min=0.0, power=1.0, begin=1500, end=160000, by_epoch=False),
]
train_dataloader = dict(batch_size=2)
val_dataloader = dict(batch_size=1)
test_dataloader = val_dataloader
