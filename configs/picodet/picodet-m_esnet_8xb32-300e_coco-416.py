# PP-PicoDet-M v1 at 416 (PaddleDetection `picodet_m_416_coco`): ESNet-M, 128-channel CSP-PAN and
# head, 4 depthwise-separable convs per level; the recipe of PicoDet-S at 416.
_base_ = './picodet-s_esnet_8xb32-300e_coco-416.py'

model = dict(
    backbone=dict(arch='m'), neck=dict(in_channels=[128, 256, 512], out_channels=128),
    bbox_head=dict(in_channels=128, stacked_convs=4))
